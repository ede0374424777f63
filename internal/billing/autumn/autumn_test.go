package autumn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
)

func newClient(t *testing.T) (*autumn.Client, *autumnfake.Server) {
	fake := autumnfake.New(t)
	return autumn.New(fake.URL, autumnfake.Key, 5*time.Second), fake
}

func TestAttachCheckoutWithoutPaymentMethod(t *testing.T) {
	c, fake := newClient(t)
	ctx := context.Background()
	fake.SetCustomer(autumnfake.Customer{ID: "org1"})
	r, err := c.Attach(ctx, autumn.AttachRequest{CustomerID: "org1", ProductID: "pro", IdempotencyKey: "k1"})
	if err != nil || !r.NeedsCheckout() || r.ChargeID != "" {
		t.Fatalf("attach %+v %v", r, err)
	}
	if cu, _ := fake.Customer("org1"); cu.BalanceMicros != 0 || len(cu.Products) != 0 {
		t.Fatalf("checkout charged: %+v", cu)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].Path != "/v1/attach" || calls[0].Body["product_id"] != "pro" || calls[0].IdempotencyKey != "k1" {
		t.Fatalf("calls %+v", calls)
	}
}

func TestAttachChargesWithPaymentMethodOnce(t *testing.T) {
	c, fake := newClient(t)
	ctx := context.Background()
	fake.SetCustomer(autumnfake.Customer{ID: "org2", PaymentMethod: true})
	r, err := c.BuyTopUp(ctx, "org2", 3, "buy-1")
	if err != nil || r.NeedsCheckout() || r.ChargeID == "" {
		t.Fatalf("top-up %+v %v", r, err)
	}
	// A retry with the same key is the same charge, not a second one.
	r2, err := c.BuyTopUp(ctx, "org2", 3, "buy-1")
	if err != nil || r2.ChargeID != r.ChargeID {
		t.Fatalf("retry %+v %v", r2, err)
	}
	bal, err := c.Balance(ctx, "org2")
	if err != nil || bal != 3*billing.TopUp.Credits*billing.Micros {
		t.Fatalf("balance %d %v", bal, err)
	}
	if q := fake.Calls()[0].Body["options"]; q == nil {
		t.Fatalf("top-up without quantity option")
	}
	// A plan attached twice answers product_already_attached, not an error.
	if _, err := c.Attach(ctx, autumn.AttachRequest{CustomerID: "org2", ProductID: "dev"}); err != nil {
		t.Fatal(err)
	}
	r3, err := c.Attach(ctx, autumn.AttachRequest{CustomerID: "org2", ProductID: "dev"})
	if err != nil || r3.Code != autumn.CodeAlreadyAttached {
		t.Fatalf("second attach %+v %v", r3, err)
	}
}

func TestTrackDeductsOnceAndDenies(t *testing.T) {
	c, fake := newClient(t)
	ctx := context.Background()
	fake.SetCustomer(autumnfake.Customer{ID: "org3", BalanceMicros: 10 * billing.Micros})
	if _, err := c.Track(ctx, "org3", 2_500_000, "compute:s:1:2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Track(ctx, "org3", 2_500_000, "compute:s:1:2", nil); err != nil {
		t.Fatal(err)
	}
	if cu, _ := fake.Customer("org3"); cu.BalanceMicros != 7_500_000 {
		t.Fatalf("balance %d after a retried post", cu.BalanceMicros)
	}
	if got := fake.Calls()[0].Body["required_balance"]; got == nil || got.(interface{ String() string }).String() != "2.5" {
		t.Fatalf("amount on the wire %v", got)
	}
	_, err := c.Track(ctx, "org3", 8*billing.Micros, "compute:s:2:3", nil)
	if !errors.Is(err, autumn.ErrDenied) {
		t.Fatalf("want denied, got %v", err)
	}
	if cu, _ := fake.Customer("org3"); cu.BalanceMicros != 7_500_000 {
		t.Fatalf("denied usage deducted: %d", cu.BalanceMicros)
	}
}

func TestErrorClasses(t *testing.T) {
	c, fake := newClient(t)
	ctx := context.Background()
	fake.SetCustomer(autumnfake.Customer{ID: "org4", PaymentMethod: true})
	fake.DeclineCards(true)
	if _, err := c.BuyTopUp(ctx, "org4", 1, "d1"); !errors.Is(err, autumn.ErrDeclined) {
		t.Fatalf("decline: %v", err)
	}
	fake.DeclineCards(false)
	fake.FailNext(503)
	if _, err := c.Balance(ctx, "org4"); !errors.Is(err, autumn.ErrTransient) {
		t.Fatalf("503: %v", err)
	}
	fake.FailNext(429)
	if _, err := c.Balance(ctx, "org4"); !errors.Is(err, autumn.ErrTransient) {
		t.Fatalf("429: %v", err)
	}
	fake.FailNext(400)
	if _, err := c.Balance(ctx, "org4"); !errors.Is(err, autumn.ErrPermanent) {
		t.Fatalf("400: %v", err)
	}
	if _, err := c.Balance(ctx, "nobody"); !errors.Is(err, autumn.ErrPermanent) {
		t.Fatalf("404: %v", err)
	}
	bad := autumn.New(fake.URL, "wrong", time.Second)
	var ae *autumn.Error
	if _, err := bad.Balance(ctx, "org4"); !errors.As(err, &ae) || ae.Status != 401 || !errors.Is(err, autumn.ErrPermanent) {
		t.Fatalf("bad key: %v", err)
	}
	// A server that never answers in time is transient.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	if _, err := autumn.New(slow.URL, "k", 50*time.Millisecond).Balance(ctx, "x"); !errors.Is(err, autumn.ErrTransient) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestParseMicros(t *testing.T) {
	for in, want := range map[string]int64{"12.5": 12_500_000, "-3": -3_000_000, "0.0000005": 1, "1e2": 100_000_000, "0.123456": 123_456} {
		if got, err := autumn.ParseMicros(in); err != nil || got != want {
			t.Errorf("ParseMicros(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := autumn.ParseMicros("abc"); err == nil {
		t.Error("abc parsed")
	}
}
