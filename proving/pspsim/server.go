package pspsim

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// rngStream is the second PCG word; any constant works, it only has to be
// fixed so the same Seed gives the same faults.
const rngStream = 0x6f6e63657061792e // "oncepay."

// Server is one simulated provider account: its charges, refunds,
// idempotency keys, fault settings and webhook queue. Create it with New,
// serve Handler, and call Run to deliver webhooks.
type Server struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	secrets [][]byte
	handler http.Handler
	// client sends webhooks; ownClient says the Server created it and so
	// may close its idle connections when Run returns.
	client    *http.Client
	ownClient bool
	// wake nudges the webhook worker when an event is queued or Run starts.
	wake chan struct{}

	mu sync.Mutex
	// webhookURL is where events go; empty: no events are queued.
	webhookURL  string
	rng         *rand.Rand
	faults      Faults
	scoped      map[string]ScopedFaults
	keys        map[string]*keyEntry
	lastSweep   time.Time
	charges     map[string]*Charge
	chargeOrder []*Charge
	refunds     []*Refund
	refundByID  map[string]*Refund
	webhooks    webhookState
}

// New returns a Server for cfg. logger may be nil (logs are discarded) and
// now may be nil (time.Now); tests inject now to expire idempotency keys
// without waiting. It fails with ErrInvalidConfig when cfg cannot work, for
// example a webhook URL without a valid whsec_ secret.
func New(cfg Config, logger *slog.Logger, now func() time.Time) (*Server, error) {
	cfg = cfg.withDefaults()
	secrets, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("new pspsim server: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	s := &Server{
		cfg:        cfg,
		log:        logger,
		now:        now,
		secrets:    secrets,
		wake:       make(chan struct{}, 1),
		webhookURL: cfg.WebhookURL,
		rng:        rand.New(rand.NewPCG(cfg.Seed, rngStream)),
		faults:     cfg.Faults,
		scoped:     make(map[string]ScopedFaults),
		keys:       make(map[string]*keyEntry),
		charges:    make(map[string]*Charge),
		refundByID: make(map[string]*Refund),
	}
	if s.client = cfg.WebhookClient; s.client == nil {
		s.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		s.ownClient = true
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the HTTP API; mount it on an http.Server or an
// httptest.Server.
func (s *Server) Handler() http.Handler { return s.handler }

// SetWebhookURL names the merchant endpoint that receives the events of
// every charge and refund from now on, for a merchant whose address is known
// only once the simulator runs (a service listening on a free port that must
// be told the simulator's URL first). Deliveries still queued go to the new
// URL. It fails with ErrInvalidConfig, and changes nothing, when raw is not
// an absolute http(s) URL or the Server has no webhook secret.
func (s *Server) SetWebhookURL(raw string) error {
	if err := checkWebhookURL(raw, len(s.secrets)); err != nil {
		return fmt.Errorf("set webhook URL: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhookURL = raw
	return nil
}

// Faults returns the fault settings in force, with one-shot counters as
// decremented so far.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults replaces the fault settings, the in-process twin of PUT
// /admin/faults. It fails with ErrInvalidFaults and changes nothing when f is
// out of range.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("set faults: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	return nil
}

// Ledger returns copies of every charge and refund ever created, oldest
// first. A non-empty reference keeps only charges whose
// metadata["reference"] equals it and the refunds of those charges.
func (s *Server) Ledger(reference string) Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Ledger{Charges: []Charge{}, Refunds: []Refund{}}
	for _, c := range s.chargeOrder {
		if matchesReference(c, reference) {
			out.Charges = append(out.Charges, c.clone())
		}
	}
	for _, r := range s.refunds {
		if reference == "" || matchesReference(s.charges[r.Charge], reference) {
			out.Refunds = append(out.Refunds, r.clone())
		}
	}
	return out
}

// matchesReference reports whether c carries reference, or reference is
// empty (no filter).
func matchesReference(c *Charge, reference string) bool {
	if reference == "" {
		return true
	}
	v, ok := c.Metadata["reference"]
	return ok && v == reference
}

// routes builds the ServeMux with Go 1.22 method patterns.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.handleHealth)

	mux.Handle("POST /v1/charges", s.requireAPIKey(s.handleCreateCharge))
	mux.Handle("GET /v1/charges", s.requireAPIKey(s.handleListCharges))
	mux.Handle("GET /v1/charges/{id}", s.requireAPIKey(s.handleGetCharge))
	mux.Handle("POST /v1/refunds", s.requireAPIKey(s.handleCreateRefund))
	mux.Handle("GET /v1/refunds/{id}", s.requireAPIKey(s.handleGetRefund))
	mux.Handle("GET /v1/ledger", s.requireAPIKey(s.handleLedger))

	// The admin API breaks every payment on demand, so it needs the key
	// as much as /v1/* does.
	mux.Handle("GET /admin/faults", s.requireAPIKey(s.handleGetFaults))
	mux.Handle("PUT /admin/faults", s.requireAPIKey(s.handlePutFaults))
	mux.Handle("POST /admin/reset", s.requireAPIKey(s.handleReset))
	mux.Handle("GET /admin/deliveries", s.requireAPIKey(s.handleDeliveries))
	return mux
}

// requireAPIKey enforces Config.APIKey on /v1/* and /admin/*, comparing in
// constant time.
func (s *Server) requireAPIKey(next http.HandlerFunc) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pspsim"`)
			writeResponse(w, "", errorResponse(&apiError{
				Type: ErrTypeAuthentication, Code: CodeInvalidAPIKey, status: http.StatusUnauthorized,
				Message: "missing or invalid API key; send Authorization: Bearer <key>",
			}))
			return
		}
		next(w, r)
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleCreateCharge(w http.ResponseWriter, r *http.Request) {
	key, apiErr := idempotencyKey(r)
	if apiErr != nil {
		writeResponse(w, "", errorResponse(apiErr))
		return
	}
	var req chargeRequest
	if apiErr := decodeBody(w, r, &req); apiErr != nil {
		writeResponse(w, key, errorResponse(apiErr))
		return
	}
	if apiErr := req.validate(); apiErr != nil {
		writeResponse(w, key, errorResponse(apiErr))
		return
	}
	s.serveIdempotent(w, r, key, req.Metadata[ScopeMetadataKey], mustJSON(req), func() response { return s.createCharge(key, req) })
}

func (s *Server) handleCreateRefund(w http.ResponseWriter, r *http.Request) {
	key, apiErr := idempotencyKey(r)
	if apiErr != nil {
		writeResponse(w, "", errorResponse(apiErr))
		return
	}
	var req refundRequest
	if apiErr := decodeBody(w, r, &req); apiErr != nil {
		writeResponse(w, key, errorResponse(apiErr))
		return
	}
	if apiErr := req.validate(); apiErr != nil {
		writeResponse(w, key, errorResponse(apiErr))
		return
	}
	s.serveIdempotent(w, r, key, req.Metadata[ScopeMetadataKey], mustJSON(req), func() response { return s.createRefund(key, req) })
}

// serveIdempotent runs the fault-injection and idempotency protocol around
// exec, which records the charge or refund and stores or releases the key.
// scope is the request's scope for ScopedFaults (empty: none).
//
// Order: draw the fate; a 503 fate answers before touching the key; else the
// key is looked up (replay, 422, 409 or proceed), the latency is applied
// while a new key is held in flight, exec runs, and the answer is written or,
// for drop and timeout fates, the connection is closed unanswered.
func (s *Server) serveIdempotent(w http.ResponseWriter, r *http.Request, key, scope string, canonical []byte, exec func() response) {
	fate, latency := s.drawFate(scope)
	if fate == fateFail {
		pause(latency)
		s.log.Info("fault injected: 503 before processing", "path", r.URL.Path, "idempotency_key", key)
		writeResponse(w, key, errorResponse(&apiError{
			Type: ErrTypeAPI, Code: CodeServiceUnavailable, status: http.StatusServiceUnavailable,
			Message: "the provider is temporarily unavailable; nothing was charged, retry with the same Idempotency-Key",
		}))
		return
	}

	s.mu.Lock()
	outcome, resp := s.beginKeyLocked(key, fingerprint(r.Method, r.URL.Path, canonical))
	s.mu.Unlock()
	if outcome == keyProceed {
		resp = s.execHeld(key, latency, exec)
	} else {
		pause(latency)
	}

	switch fate {
	case fateDrop:
		s.log.Info("fault injected: dropping connection after processing",
			"path", r.URL.Path, "idempotency_key", key, "status", resp.status)
		dropConnection(w)
		return
	case fateTimeout:
		s.log.Info("fault injected: hanging until the client gives up",
			"path", r.URL.Path, "idempotency_key", key, "status", resp.status)
		<-r.Context().Done()
		dropConnection(w)
		return
	}
	writeResponse(w, key, resp)
}

// execHeld applies the latency and runs exec for a key held in flight,
// releasing the key if exec panics so the merchant is not locked out.
func (s *Server) execHeld(key string, latency time.Duration, exec func() response) response {
	done := false
	defer func() {
		if !done {
			s.mu.Lock()
			s.releaseKeyLocked(key)
			s.mu.Unlock()
		}
	}()
	pause(latency)
	resp := exec()
	done = true
	return resp
}

// createCharge records a charge for a validated request whose key is held.
func (s *Server) createCharge(key string, req chargeRequest) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := &Charge{
		ID:             newID("ch_"),
		Object:         ObjectCharge,
		Amount:         req.Amount,
		Currency:       req.Currency,
		PaymentMethod:  req.PaymentMethod,
		Status:         StatusSucceeded,
		Metadata:       req.Metadata,
		IdempotencyKey: key,
		Created:        s.now().Unix(),
	}
	var failure string
	switch req.PaymentMethod {
	case PaymentMethodDeclined:
		failure = CodeCardDeclined
	case PaymentMethodInsufficientFunds:
		failure = CodeInsufficientFunds
	default:
		if s.declineAnywayLocked() {
			failure = CodeCardDeclined
		}
	}

	var resp response
	evType := EventChargeSucceeded
	if failure == "" {
		resp = response{status: http.StatusOK, body: mustJSON(ch), idempotent: true}
	} else {
		msg := declineMessage(failure)
		ch.Status = StatusFailed
		ch.FailureCode = &failure
		ch.FailureMessage = &msg
		evType = EventChargeFailed
		resp = errorResponse(&apiError{
			Type: ErrTypeCard, Code: failure, DeclineCode: failure, Message: msg, Charge: ch.ID,
			status: http.StatusPaymentRequired,
		})
		resp.idempotent = true
	}
	s.charges[ch.ID] = ch
	s.chargeOrder = append(s.chargeOrder, ch)
	s.finishKeyLocked(key, resp)
	s.enqueueEventLocked(evType, ch.clone(), nil)
	s.log.Info("charge created", "charge", ch.ID, "status", ch.Status, "amount", ch.Amount,
		"currency", ch.Currency, "idempotency_key", key, "reference", ch.Metadata["reference"])
	return resp
}

// declineMessage is the human-readable text for a decline code.
func declineMessage(code string) string {
	if code == CodeInsufficientFunds {
		return "Your card has insufficient funds."
	}
	return "Your card was declined."
}

// createRefund records a refund for a validated request whose key is held.
// Refusals (unknown, failed or exhausted charge) record nothing and release
// the key, like validation errors.
func (s *Server) createRefund(key string, req refundRequest) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	refuse := func(e *apiError) response {
		s.releaseKeyLocked(key)
		return errorResponse(e)
	}
	ch, ok := s.charges[req.Charge]
	if !ok {
		return refuse(&apiError{Type: ErrTypeInvalidRequest, Code: CodeResourceMissing, Param: "charge",
			status: http.StatusNotFound, Message: fmt.Sprintf("no such charge: %q", req.Charge)})
	}
	if ch.Status != StatusSucceeded {
		return refuse(invalidRequest(CodeChargeFailed, "charge", "the charge failed; there is nothing to refund"))
	}
	remaining := ch.Amount - ch.AmountRefunded
	if remaining == 0 {
		return refuse(invalidRequest(CodeChargeAlreadyRefunded, "charge", "the charge has already been fully refunded"))
	}
	amount := remaining
	if req.Amount != nil {
		amount = *req.Amount
	}
	if amount > remaining {
		return refuse(invalidRequest(CodeAmountTooLarge, "amount",
			fmt.Sprintf("refund amount %d is greater than the %d still refundable on the charge", amount, remaining)))
	}
	rf := &Refund{
		ID:             newID("re_"),
		Object:         ObjectRefund,
		Charge:         ch.ID,
		Amount:         amount,
		Currency:       ch.Currency,
		Status:         StatusSucceeded,
		Metadata:       req.Metadata,
		IdempotencyKey: key,
		Created:        s.now().Unix(),
	}
	ch.AmountRefunded += amount
	s.refunds = append(s.refunds, rf)
	s.refundByID[rf.ID] = rf
	resp := response{status: http.StatusOK, body: mustJSON(rf), idempotent: true}
	s.finishKeyLocked(key, resp)
	rfCopy := rf.clone()
	s.enqueueEventLocked(EventChargeRefunded, ch.clone(), &rfCopy)
	s.log.Info("refund created", "refund", rf.ID, "charge", ch.ID, "amount", amount, "idempotency_key", key)
	return resp
}

func (s *Server) handleGetCharge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	ch, ok := s.charges[id]
	var out Charge
	if ok {
		out = ch.clone()
	}
	s.mu.Unlock()
	if !ok {
		writeResponse(w, "", errorResponse(&apiError{Type: ErrTypeInvalidRequest, Code: CodeResourceMissing,
			Param: "id", status: http.StatusNotFound, Message: fmt.Sprintf("no such charge: %q", id)}))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGetRefund(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	rf, ok := s.refundByID[id]
	var out Refund
	if ok {
		out = rf.clone()
	}
	s.mu.Unlock()
	if !ok {
		writeResponse(w, "", errorResponse(&apiError{Type: ErrTypeInvalidRequest, Code: CodeResourceMissing,
			Param: "id", status: http.StatusNotFound, Message: fmt.Sprintf("no such refund: %q", id)}))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// chargeList is the body of GET /v1/charges.
type chargeList struct {
	Data []Charge `json:"data"`
}

func (s *Server) handleListCharges(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, chargeList{Data: s.Ledger(r.URL.Query().Get("reference")).Charges})
}

func (s *Server) handleLedger(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Ledger(r.URL.Query().Get("reference")))
}

// handleGetFaults answers the global fault settings, or with ?scope=S the
// one-shot counters only S's POSTs meet (ScopedFaults).
func (s *Server) handleGetFaults(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("scope") {
		writeJSON(w, http.StatusOK, s.ScopedFaults(r.URL.Query().Get("scope")))
		return
	}
	writeJSON(w, http.StatusOK, s.Faults())
}

// handlePutFaults replaces the global fault settings, or with ?scope=S the
// one-shot counters of S (a body of ScopedFaults; its scope member, when
// present, must be S).
func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("scope") {
		s.putScopedFaults(w, r, r.URL.Query().Get("scope"))
		return
	}
	var f Faults
	if apiErr := decodeBody(w, r, &f); apiErr != nil {
		writeResponse(w, "", errorResponse(apiErr))
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeResponse(w, "", errorResponse(invalidRequest("invalid_faults", "", err.Error())))
		return
	}
	s.log.Info("faults replaced", "faults", f)
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) putScopedFaults(w http.ResponseWriter, r *http.Request, scope string) {
	var f ScopedFaults
	if apiErr := decodeBody(w, r, &f); apiErr != nil {
		writeResponse(w, "", errorResponse(apiErr))
		return
	}
	if f.Scope != "" && f.Scope != scope {
		writeResponse(w, "", errorResponse(invalidRequest("invalid_faults", "scope", "the body's scope differs from the query's")))
		return
	}
	f.Scope = scope
	if err := s.SetScopedFaults(f); err != nil {
		writeResponse(w, "", errorResponse(invalidRequest("invalid_faults", "", err.Error())))
		return
	}
	s.log.Info("scoped faults replaced", "faults", f)
	writeJSON(w, http.StatusOK, s.ScopedFaults(scope))
}

// handleReset clears every fault setting, global and scoped.
func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	s.faults = Faults{}
	clear(s.scoped)
	s.mu.Unlock()
	s.log.Info("faults cleared")
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handleDeliveries(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Deliveries())
}
