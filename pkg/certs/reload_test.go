package certs

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writePair(t *testing.T, ca *testCA, certFile, keyFile string) string {
	t.Helper()
	pair := servingPair(t, ca, time.Hour)
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	// Written as an operator's tool would: to a temp file, renamed over.
	for path, data := range map[string][]byte{certFile: pemEncode("CERTIFICATE", pair.Certificate[0]), keyFile: pemEncode("PRIVATE KEY", keyDER)} {
		if err := os.WriteFile(path+".new", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	return leaf.SerialNumber.String()
}

func TestKeyPairFilesReloadOnChange(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writePair(t, ca, certFile, keyFile)
	k, err := NewKeyPairFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	k.r.interval = 20 * time.Millisecond
	if got := k.Current().Leaf.SerialNumber.String(); got != first {
		t.Fatalf("serial %s, want %s", got, first)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)

	// A broken file keeps the last good pair.
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := k.Current().Leaf.SerialNumber.String(); got != first {
		t.Fatalf("after a broken write: serial %s, want %s kept", got, first)
	}
	second := writePair(t, ca, certFile, keyFile)
	waitFor(t, func() bool { return k.Current().Leaf.SerialNumber.String() == second })
}

func TestCABundleFileReloadOnChange(t *testing.T) {
	a, b := newTestCA(t), newTestCA(t)
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, a.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewCABundleFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c.r.interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	trusts := func(ca *testCA) bool {
		block, _ := pem.Decode(ca.sign(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "u"}, PublicKey: &ca.key.PublicKey}, time.Hour, x509.ExtKeyUsageClientAuth))
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: c.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	if !trusts(a) || trusts(b) {
		t.Fatal("initial bundle")
	}
	if err := os.WriteFile(path, append(append([]byte{}, a.pem...), b.pem...), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return trusts(b) })
}

// With the directory watched, a rewritten pair is served within moments,
// though the files are looked at only every hour otherwise; so is a pair
// swapped in by a rename, a new inode.
func TestKeyPairFilesReloadOnTheWatch(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, ca, certFile, keyFile)
	k, err := NewKeyPairFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	k.r.interval, k.r.watchedInterval = time.Hour, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	second := writePair(t, ca, certFile, keyFile)
	waitFor(t, func() bool { return k.Current().Leaf.SerialNumber.String() == second })

	other := t.TempDir()
	third := writePair(t, ca, filepath.Join(other, "tls.crt"), filepath.Join(other, "tls.key"))
	for _, name := range []string{"tls.key", "tls.crt"} {
		if err := os.Rename(filepath.Join(other, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return k.Current().Leaf.SerialNumber.String() == third })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
