package tenants

import (
	"errors"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
)

const contextKey = "tenant"

// Middleware authenticates `Authorization: Bearer <api key>` and puts the
// tenant into the echo context. A missing or unknown key is 401, and so are
// two Authorization headers.
func Middleware(s *Service) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if len(c.Request().Header.Values("Authorization")) > 1 {
				// Which one would name the tenant? Neither: a proxy that
				// adds its own, or a client that merges two configs, must
				// not have the first one win silently.
				return problem.New(problem.Unauthorized, "Send exactly one Authorization header.")
			}
			scheme, key, ok := strings.Cut(c.Request().Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
				return problem.New(problem.Unauthorized, "Send your API key in the Authorization header as: Bearer <key>.")
			}
			t, err := s.Authenticate(c.Request().Context(), strings.TrimSpace(key))
			if errors.Is(err, ErrUnknownKey) {
				return problem.New(problem.Unauthorized, "The API key is not valid.")
			}
			if err != nil {
				return err
			}
			Put(c, t)
			return next(c)
		}
	}
}

// FromContext returns the tenant that Middleware authenticated. Handlers
// behind Middleware always have one; without it, the zero Tenant matches no
// row, so a wiring mistake fails closed.
func FromContext(c echo.Context) Tenant {
	t, _ := c.Get(contextKey).(Tenant)
	return t
}

// Put puts t into c as the tenant of the request, as Middleware does once it
// authenticated t. Only Middleware does in the service; a handler's tests
// that authenticate without a database use it too.
func Put(c echo.Context, t Tenant) { c.Set(contextKey, t) }
