// Package testkit is the one kit the service's tests share: a clock the test
// moves forward, a polling wait with a deadline, a logger that writes to the
// test log, the fixtures several packages need (a fresh migrated database,
// tenants with API keys, the demo tenants), and the reading of an HTTP
// answer and of its problem+json body.
//
// It serves the developer rules on tests: real parts (a real PostgreSQL per
// test, never a mock of it) and no sleeps to wait for asynchronous work
// (WaitFor polls a condition until a deadline and names what it waited for
// when it gives up).
//
// Fixtures are built on the services' public methods (tenants.Service.Create,
// SeedDemo, Authenticate), not on their tables, so they keep working whatever
// the services do inside.
//
// Only tests, and test-only packages such as brokertest, import it; no
// program links it (TestNoBinaryLinksTheKit). It imports internal/tenants,
// internal/testdb, internal/postgres and internal/problem, so tests of those
// packages that use it are external test packages (package tenants_test).
package testkit
