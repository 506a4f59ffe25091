package server

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"k8s.io/klog/v2"
)

// withCanonicalPath refuses paths with ".", ".." or empty segments before
// anything else looks at them. Authorization and routing then see the same
// path, and no redirect to a cleaned path is ever sent: the apiserver must
// not be asked to follow one (CVE-2020-8559).
func withCanonicalPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isCanonicalPath(r.URL.Path) {
			http.Error(w, fmt.Sprintf("invalid path %q: it must be absolute, without '.', '..' or empty segments", r.URL.Path), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isCanonicalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	if p == "/" {
		return true
	}
	return path.Clean(p) == strings.TrimSuffix(p, "/")
}

// withAuth authenticates the request, then authorizes it as a verb on the
// node's subresources; the first subresource allowed lets it through.
func withAuth(authn *authenticator, authz *authorizer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		u, err := authn.authenticate(r)
		if errors.Is(err, errTokenReviewsThrottled) {
			logger.V(3).Info("Refused a request: too many token reviews", "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests with bearer tokens to review; try again later", http.StatusTooManyRequests)
			return
		}
		if err != nil {
			logger.V(3).Info("Refused unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err.Error())
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb, subresources := requestAttributes(r.Method, r.URL.Path)
		if verb == "" {
			http.Error(w, fmt.Sprintf("method %s is not supported", r.Method), http.StatusMethodNotAllowed)
			return
		}
		var reasons []string
		for _, sub := range subresources {
			allowed, reason, err := authz.authorize(r.Context(), u, verb, sub)
			if err != nil {
				logger.Error(err, "Authorization failed", "user", u.Name, "verb", verb, "subresource", sub)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)", u.Name, verb, resourceNodes, sub), http.StatusInternalServerError)
				return
			}
			if allowed {
				ctx := withUser(klog.NewContext(r.Context(), logger.WithValues("user", u.Name)), u)
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			if reason != "" {
				reasons = append(reasons, reason)
			}
		}
		logger.V(2).Info("Forbidden", "user", u.Name, "verb", verb, "resource", resourceNodes, "subresources", subresources, "path", r.URL.Path)
		msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)", u.Name, verb, resourceNodes, subresources)
		if len(reasons) > 0 {
			msg += ": " + strings.Join(reasons, "; ")
		}
		http.Error(w, msg, http.StatusForbidden)
	})
}

// withUpgradeFailureClose closes the connection of an upgrade request
// (exec, attach, port-forward over SPDY or WebSocket) that is answered
// with anything but 101 Switching Protocols, whatever refused it (path,
// authentication, authorization, a cap, the runtime), as the kubelet's
// upgrade-aware proxy closes one the runtime refused: a client whose upgrade
// failed must not go on to send requests on a connection it believed was to
// become a stream (CVE-2018-1002105).
func withUpgradeFailureClose(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isUpgradeRequest(r) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&upgradeResponseWriter{ResponseWriter: w}, r)
	})
}

// upgradeResponseWriter marks any final response "Connection: close",
// which the server honours by closing the connection after it. A 101 is
// written on the hijacked connection and never passes here.
type upgradeResponseWriter struct {
	http.ResponseWriter
	wroteHeader bool
}

func (w *upgradeResponseWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.wroteHeader = true
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *upgradeResponseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *upgradeResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpError is an error with the status code a handler answers it with.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func errorf(code int, format string, args ...any) error {
	return &httpError{code: code, err: fmt.Errorf(format, args...)}
}

// writeError answers err with its status code, or 500 when it has none.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	code := http.StatusInternalServerError
	if errors.As(err, &he) {
		code = he.code
	}
	if code >= 500 {
		klog.FromContext(r.Context()).Error(err, "Request failed", "path", r.URL.Path)
	}
	http.Error(w, err.Error(), code)
}
