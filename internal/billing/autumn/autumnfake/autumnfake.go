// Package autumnfake is an in-memory Autumn for tests: an httptest server
// speaking the subset of Autumn's wire format the autumn client uses
// (POST /v1/attach, POST /v1/check with send_event, POST /v1/track, GET
// /v1/customers/{id}), with customers, credits balances, products, a
// payment-method-on-file flag, a card-decline switch, failure injection and
// a record of every call.
package autumnfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/billing"
)

// Key is the secret key the fake accepts.
const Key = "am_sk_test_fake"

// Customer is a fake customer.
type Customer struct {
	ID            string
	BalanceMicros int64
	Products      []string
	PaymentMethod bool
}

// Call is one recorded request.
type Call struct {
	Method, Path   string
	IdempotencyKey string
	Body           map[string]any
}

// Server is the fake.
type Server struct {
	URL string

	mu        sync.Mutex
	customers map[string]*Customer
	decline   bool
	failures  []int
	calls     []Call
	charges   map[string]string // idempotency key → charge id
	events    map[string]bool   // tracked idempotency keys
	nCharge   int
	prefix    string
}

// New starts the fake, closed when the test ends.
func New(t testing.TB) *Server {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := &Server{customers: map[string]*Customer{}, charges: map[string]string{}, events: map[string]bool{}, prefix: hex.EncodeToString(b)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// SetCustomer creates or replaces a customer.
func (s *Server) SetCustomer(c Customer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cc := c
	s.customers[c.ID] = &cc
}

// Customer returns a copy of a customer (ok=false when unknown).
func (s *Server) Customer(id string) (Customer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.customers[id]
	if !ok {
		return Customer{}, false
	}
	out := *c
	out.Products = append([]string(nil), c.Products...)
	return out, true
}

// DeclineCards makes every charge fail with card_declined.
func (s *Server) DeclineCards(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decline = on
}

// FailNext makes the next len(statuses) requests fail with those HTTP
// statuses.
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, statuses...)
}

// Calls returns the recorded calls (failed ones included).
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CallsFor counts the calls about a customer (customer_id in the body or
// the path).
func (s *Server) CallsFor(customerID string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Body["customer_id"] == customerID || strings.HasSuffix(c.Path, "/"+customerID) {
			n++
		}
	}
	return n
}

// CallsTo counts the calls to path.
func (s *Server) CallsTo(path string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Path == path {
			n++
		}
	}
	return n
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"code": code, "message": msg})
}

func (s *Server) customer(id string) *Customer {
	c, ok := s.customers[id]
	if !ok {
		c = &Customer{ID: id}
		s.customers[id] = c
	}
	return c
}

func micros(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, false
	}
	r.Mul(r, big.NewRat(billing.Micros, 1))
	if !r.IsInt() {
		return 0, false
	}
	return r.Num().Int64(), true
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{}
	if r.Body != nil {
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		_ = dec.Decode(&body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body})
	if r.Header.Get("Authorization") != "Bearer "+Key {
		fail(w, http.StatusUnauthorized, "unauthorized", "invalid secret key")
		return
	}
	if len(s.failures) > 0 {
		st := s.failures[0]
		s.failures = s.failures[1:]
		fail(w, st, "injected", "injected failure")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/attach":
		s.attach(w, r, body)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/check":
		s.check(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/track":
		s.track(w, body)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/customers/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/customers/")
		c, ok := s.customers[id]
		if !ok {
			fail(w, http.StatusNotFound, "customer_not_found", "customer "+id+" not found")
			return
		}
		products := []map[string]any{}
		for _, p := range c.Products {
			products = append(products, map[string]any{"id": p, "status": "active"})
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": c.ID, "products": products,
			"features": map[string]any{"credits": map[string]any{"id": "credits", "balance": json.Number(billing.FormatMicros(c.BalanceMicros))}}})
	default:
		fail(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request, body map[string]any) {
	cid, _ := body["customer_id"].(string)
	pid, _ := body["product_id"].(string)
	if cid == "" || pid == "" {
		fail(w, http.StatusBadRequest, "invalid_request", "customer_id and product_id are required")
		return
	}
	c := s.customer(cid)
	var credits int64
	if pid == billing.TopUp.ProductID {
		opts, _ := body["options"].([]any)
		if len(opts) != 1 {
			fail(w, http.StatusBadRequest, "invalid_options", "top-up needs one option")
			return
		}
		o, _ := opts[0].(map[string]any)
		q, ok := o["quantity"].(json.Number)
		n, err := q.Int64()
		if !ok || err != nil || n <= 0 {
			fail(w, http.StatusBadRequest, "invalid_options", "bad quantity")
			return
		}
		credits = n
	} else {
		p, ok := billing.PlanByID(pid)
		if !ok {
			fail(w, http.StatusNotFound, "product_not_found", "product "+pid+" not found")
			return
		}
		for _, have := range c.Products {
			if have == pid {
				fail(w, http.StatusBadRequest, "product_already_attached", "product "+pid+" is already attached")
				return
			}
		}
		credits = p.Credits
	}
	key := r.Header.Get("Idempotency-Key")
	if id, ok := s.charges[key]; ok && key != "" {
		writeJSON(w, http.StatusOK, map[string]any{"customer_id": cid, "product_ids": []string{pid}, "code": "updated_product_successfully",
			"message": "replayed", "invoice": map[string]any{"stripe_id": id}})
		return
	}
	if !c.PaymentMethod {
		writeJSON(w, http.StatusOK, map[string]any{"checkout_url": "https://checkout.stripe.test/c/pay/" + cid + "/" + pid,
			"customer_id": cid, "product_ids": []string{pid}, "code": "checkout_created", "message": "checkout created"})
		return
	}
	if s.decline {
		fail(w, http.StatusPaymentRequired, "card_declined", "your card was declined")
		return
	}
	s.nCharge++
	// Globally unique like Stripe's invoice ids (tests share a database).
	id := fmt.Sprintf("in_fake_%s_%d", s.prefix, s.nCharge)
	if key != "" {
		s.charges[key] = id
	}
	c.BalanceMicros += credits * billing.Micros
	if pid != billing.TopUp.ProductID {
		c.Products = append(c.Products, pid)
	}
	writeJSON(w, http.StatusOK, map[string]any{"customer_id": cid, "product_ids": []string{pid}, "code": "updated_product_successfully",
		"message": "attached", "invoice": map[string]any{"stripe_id": id}})
}

func (s *Server) check(w http.ResponseWriter, body map[string]any) {
	cid, _ := body["customer_id"].(string)
	c := s.customer(cid)
	req, ok := micros(body["required_balance"])
	if !ok {
		req = billing.Micros
	}
	key, _ := body["idempotency_key"].(string)
	send, _ := body["send_event"].(bool)
	if send && key != "" && s.events[key] {
		writeJSON(w, http.StatusOK, map[string]any{"allowed": true, "code": "feature_found", "customer_id": cid,
			"feature_id": "credits", "balance": json.Number(billing.FormatMicros(c.BalanceMicros))})
		return
	}
	allowed := c.BalanceMicros >= req
	if allowed && send {
		c.BalanceMicros -= req
		if key != "" {
			s.events[key] = true
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"allowed": allowed, "code": "feature_found", "customer_id": cid,
		"feature_id": "credits", "required_balance": body["required_balance"], "balance": json.Number(billing.FormatMicros(c.BalanceMicros))})
}

func (s *Server) track(w http.ResponseWriter, body map[string]any) {
	cid, _ := body["customer_id"].(string)
	c := s.customer(cid)
	v, ok := micros(body["value"])
	if !ok {
		v = billing.Micros
	}
	key, _ := body["idempotency_key"].(string)
	if key == "" || !s.events[key] {
		c.BalanceMicros -= v
		if key != "" {
			s.events[key] = true
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": "evt_" + key, "code": "event_received", "customer_id": cid, "feature_id": "credits"})
}
