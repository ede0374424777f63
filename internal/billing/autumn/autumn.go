// Package autumn is the client of Autumn, the external billing provider:
// plan activation and credit purchases (POST
// /v1/attach), posting usage of the credits feature (POST /v1/check with
// send_event, so Autumn checks and deducts atomically and can deny), and
// reading a customer's credits balance (GET /v1/customers/{id}).
//
// Amounts: Autumn counts the credits feature in credits (decimal); this
// client takes and returns int64 micro-credits and writes exact decimals
// on the wire, so nothing is rounded through a float.
//
// Errors are classified so callers can act on them: ErrDenied (the
// customer's balance does not cover the usage), ErrDeclined (the card on
// file was declined), ErrTransient (timeouts, 5xx, 429: retry later) and
// ErrPermanent (other 4xx: the request itself is wrong). Every error wraps
// exactly one of them.
package autumn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
)

// FeatureCredits is the Autumn feature that holds an organization's credits.
const FeatureCredits = "credits"

// Error classes.
var (
	ErrDenied    = errors.New("autumn: denied: insufficient balance")
	ErrDeclined  = errors.New("autumn: card declined")
	ErrTransient = errors.New("autumn: transient failure")
	ErrPermanent = errors.New("autumn: request rejected")
)

// Autumn response codes this client interprets.
const (
	CodeCheckoutCreated = "checkout_created"
	CodeAlreadyAttached = "product_already_attached"
	CodeCardDeclined    = "card_declined"
	CodePaymentFailed   = "payment_failed"
)

// Error is a failed Autumn call.
type Error struct {
	Op      string
	Status  int // 0 when no response came back
	Code    string
	Message string
	class   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("autumn %s: status %d %s: %s", e.Op, e.Status, e.Code, e.Message)
}

// Unwrap returns the error class (ErrDenied, ErrDeclined, ErrTransient,
// ErrPermanent).
func (e *Error) Unwrap() error { return e.class }

// Client talks to Autumn.
type Client struct {
	baseURL string
	key     string
	http    *http.Client
}

// New returns a client of the Autumn API at baseURL (e.g.
// https://api.useautumn.com) authenticating with secretKey. timeout bounds
// every call [10s].
func New(baseURL, secretKey string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Client{baseURL: strings.TrimRight(baseURL, "/"), key: secretKey, http: &http.Client{Timeout: timeout}}
}

// AttachRequest attaches a product (a plan, or Quantity credits of a top-up
// pack) to a customer.
type AttachRequest struct {
	CustomerID string
	ProductID  string
	// Quantity of the credits feature for prepaid products (top-up packs):
	// packs × credits per pack. 0 for plans.
	Quantity   int64
	SuccessURL string
	// IdempotencyKey makes a retried purchase charge once.
	IdempotencyKey string
}

// AttachResult is Autumn's answer: either a checkout URL (no payment method
// on file: nothing was charged) or the product attached and charged.
type AttachResult struct {
	CheckoutURL string `json:"checkout_url"`
	Code        string `json:"code"`
	Message     string `json:"message"`
	// ChargeID identifies the charge (Autumn's invoice), the key under
	// which the credits are granted once.
	ChargeID string `json:"-"`
}

// NeedsCheckout reports whether the customer must complete a checkout.
func (r AttachResult) NeedsCheckout() bool { return r.CheckoutURL != "" }

type attachBody struct {
	CustomerID string         `json:"customer_id"`
	ProductID  string         `json:"product_id"`
	Options    []attachOption `json:"options,omitempty"`
	SuccessURL string         `json:"success_url,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

type attachOption struct {
	FeatureID string `json:"feature_id"`
	Quantity  int64  `json:"quantity"`
}

// Attach attaches a product. A product already attached is not an error
// (Code == CodeAlreadyAttached).
func (c *Client) Attach(ctx context.Context, r AttachRequest) (AttachResult, error) {
	body := attachBody{CustomerID: r.CustomerID, ProductID: r.ProductID, SuccessURL: r.SuccessURL}
	if r.Quantity > 0 {
		body.Options = []attachOption{{FeatureID: FeatureCredits, Quantity: r.Quantity}}
	}
	var raw struct {
		AttachResult
		Invoice *struct {
			StripeID string `json:"stripe_id"`
		} `json:"invoice"`
	}
	err := c.do(ctx, "attach", http.MethodPost, "/v1/attach", r.IdempotencyKey, body, &raw)
	var ae *Error
	if errors.As(err, &ae) && ae.Code == CodeAlreadyAttached {
		return AttachResult{Code: CodeAlreadyAttached, Message: ae.Message}, nil
	}
	if err != nil {
		return AttachResult{}, err
	}
	res := raw.AttachResult
	if raw.Invoice != nil {
		res.ChargeID = raw.Invoice.StripeID
	}
	return res, nil
}

// BuyTopUp buys packs of billing.TopUp for the customer.
func (c *Client) BuyTopUp(ctx context.Context, customerID string, packs int, idempotencyKey string) (AttachResult, error) {
	if packs < 1 {
		return AttachResult{}, &Error{Op: "attach", Code: "invalid_quantity", Message: "at least one pack", class: ErrPermanent}
	}
	return c.Attach(ctx, AttachRequest{CustomerID: customerID, ProductID: billing.TopUp.ProductID,
		Quantity: int64(packs) * billing.TopUp.Credits, IdempotencyKey: idempotencyKey})
}

// TrackResult is a posted usage.
type TrackResult struct {
	// Raw is Autumn's response, kept with the billing event.
	Raw json.RawMessage
	// BalanceMicros is the balance after the usage, when Autumn reported it.
	BalanceMicros *int64
}

// Track posts usage of creditsMicros credits under idempotencyKey (the
// billing event's key: a retried post deducts once). It uses check with
// send_event, so Autumn deducts only if the balance covers the usage and
// otherwise answers allowed=false: ErrDenied.
func (c *Client) Track(ctx context.Context, customerID string, creditsMicros int64, idempotencyKey string, properties map[string]any) (TrackResult, error) {
	body := map[string]any{
		"customer_id": customerID, "feature_id": FeatureCredits,
		"required_balance": json.Number(billing.FormatMicros(creditsMicros)),
		"send_event":       true, "idempotency_key": idempotencyKey,
	}
	if len(properties) > 0 {
		body["properties"] = properties
	}
	var raw json.RawMessage
	if err := c.do(ctx, "track", http.MethodPost, "/v1/check", idempotencyKey, body, &raw); err != nil {
		return TrackResult{}, err
	}
	var resp struct {
		Allowed bool         `json:"allowed"`
		Balance *json.Number `json:"balance"`
		Code    string       `json:"code"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return TrackResult{}, &Error{Op: "track", Status: 200, Code: "bad_response", Message: err.Error(), class: ErrTransient}
	}
	res := TrackResult{Raw: raw}
	if resp.Balance != nil {
		if m, err := ParseMicros(string(*resp.Balance)); err == nil {
			res.BalanceMicros = &m
		}
	}
	if !resp.Allowed {
		return res, &Error{Op: "track", Status: 200, Code: resp.Code, Message: "balance does not cover the usage", class: ErrDenied}
	}
	return res, nil
}

// Customer is what this system reads of an Autumn customer.
type Customer struct {
	ID string
	// BalanceMicros of the credits feature.
	BalanceMicros int64
	// Products are the ids of the customer's active products.
	Products []string
}

// Customer reads a customer and its credits balance.
func (c *Client) Customer(ctx context.Context, customerID string) (Customer, error) {
	var raw struct {
		ID       string `json:"id"`
		Products []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"products"`
		Features map[string]struct {
			Balance *json.Number `json:"balance"`
		} `json:"features"`
	}
	if err := c.do(ctx, "customer", http.MethodGet, "/v1/customers/"+url.PathEscape(customerID), "", nil, &raw); err != nil {
		return Customer{}, err
	}
	out := Customer{ID: raw.ID}
	for _, p := range raw.Products {
		if p.Status == "" || p.Status == "active" || p.Status == "trialing" {
			out.Products = append(out.Products, p.ID)
		}
	}
	if f, ok := raw.Features[FeatureCredits]; ok && f.Balance != nil {
		m, err := ParseMicros(string(*f.Balance))
		if err != nil {
			return Customer{}, &Error{Op: "customer", Status: 200, Code: "bad_response", Message: err.Error(), class: ErrTransient}
		}
		out.BalanceMicros = m
	}
	return out, nil
}

// Balance is the customer's credits balance in micros.
func (c *Client) Balance(ctx context.Context, customerID string) (int64, error) {
	cu, err := c.Customer(ctx, customerID)
	return cu.BalanceMicros, err
}

// ParseMicros reads a decimal number ("12.5", "-3", "1e2") into millionths,
// exactly (rounded half away from zero beyond six decimals).
func ParseMicros(s string) (int64, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, fmt.Errorf("autumn: %q is not a number", s)
	}
	r.Mul(r, big.NewRat(billing.Micros, 1))
	f, _ := r.Float64()
	if f > 9e18 || f < -9e18 {
		return 0, fmt.Errorf("autumn: %q is out of range", s)
	}
	n := new(big.Int).Quo(r.Num(), r.Denom())
	rem := new(big.Rat).Sub(r, new(big.Rat).SetInt(n))
	if rem.Abs(rem).Cmp(big.NewRat(1, 2)) >= 0 {
		if r.Sign() < 0 {
			n.Sub(n, big.NewInt(1))
		} else {
			n.Add(n, big.NewInt(1))
		}
	}
	return n.Int64(), nil
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (c *Client) do(ctx context.Context, op, method, path, idemKey string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &Error{Op: op, Code: "encode", Message: err.Error(), class: ErrPermanent}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, body)
	if err != nil {
		return &Error{Op: op, Code: "request", Message: err.Error(), class: ErrPermanent}
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// Timeouts and connection failures: the request may or may not
		// have happened; idempotency keys make the retry safe.
		return &Error{Op: op, Code: "network", Message: err.Error(), class: ErrTransient}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Op: op, Status: resp.StatusCode, Code: "network", Message: err.Error(), class: ErrTransient}
	}
	if resp.StatusCode >= 300 {
		var eb errorBody
		_ = json.Unmarshal(raw, &eb)
		if eb.Message == "" {
			eb.Message = http.StatusText(resp.StatusCode)
		}
		e := &Error{Op: op, Status: resp.StatusCode, Code: eb.Code, Message: eb.Message}
		switch {
		case eb.Code == CodeCardDeclined || eb.Code == CodePaymentFailed:
			e.class = ErrDeclined
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout:
			e.class = ErrTransient
		default:
			e.class = ErrPermanent
		}
		return e
	}
	if out == nil {
		return nil
	}
	if rm, ok := out.(*json.RawMessage); ok {
		*rm = append((*rm)[:0], raw...)
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Op: op, Status: resp.StatusCode, Code: "bad_response", Message: err.Error(), class: ErrTransient}
	}
	return nil
}
