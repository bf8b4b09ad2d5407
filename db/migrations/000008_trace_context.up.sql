-- The W3C trace context (traceparent, tracestate) of the request that wrote
-- the row, as the propagator's JSON object; NULL when tracing was off.
--
-- outbox_events: the dispatcher continues the request's trace when it
-- publishes the event (and sends it on in the message headers), so one trace
-- shows request, commit, publish and consume.
--
-- api_idempotency: set once, by the claim; a retry that takes over an
-- abandoned attempt, the recoverer and a webhook that finishes the payment
-- link their own traces to the original request's.
ALTER TABLE outbox_events ADD COLUMN trace_context jsonb;
ALTER TABLE api_idempotency ADD COLUMN trace_context jsonb;
