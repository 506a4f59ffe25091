package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}

func TestHealthzServesAndStops(t *testing.T) {
	h, err := NewHealthz(HealthzConfig{BindAddress: "127.0.0.1", Port: 0})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.Run(ctx) }()

	resp, err := http.Get("http://" + h.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestNewHealthzErrors(t *testing.T) {
	if _, err := NewHealthz(HealthzConfig{BindAddress: "localhost", Port: 10248}); err == nil || !strings.Contains(err.Error(), "healthzBindAddress") {
		t.Errorf("hostname accepted: %v", err)
	}
	h, err := NewHealthz(HealthzConfig{BindAddress: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.listener.Close()
	port, err := strconv.Atoi(h.Addr()[strings.LastIndex(h.Addr(), ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewHealthz(HealthzConfig{BindAddress: "127.0.0.1", Port: int32(port)}); err == nil {
		t.Errorf("busy port accepted")
	}
}
