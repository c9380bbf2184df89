package httpproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
)

// An ephemeral CA's leaves verify against it for their name only, are cached,
// and cannot sign further (MaxPathLen 0); the CA is P-256 and short-lived.
func TestEphemeralCA(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := ca.Cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("CA key %T", ca.Cert.PublicKey)
	}
	if d := time.Until(ca.Cert.NotAfter); d > caValidity || d < caValidity-time.Minute || !ca.Cert.MaxPathLenZero {
		t.Fatalf("validity %v, MaxPathLenZero %v", d, ca.Cert.MaxPathLenZero)
	}
	leaf, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ca.Leaf("api.test")
	if again != leaf {
		t.Error("the leaf is not cached")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Errorf("the leaf does not verify: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: pool}); err == nil {
		t.Error("the leaf verifies for another name")
	}
	if leaf.Leaf.NotAfter.After(ca.Cert.NotAfter) || leaf.Leaf.IsCA {
		t.Error("a leaf outlives its CA or is a CA")
	}
	// another sandbox's CA does not vouch for this one's leaves
	other, _ := NewCA("other")
	op := x509.NewCertPool()
	op.AddCert(other.Cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: op}); err == nil {
		t.Error("another CA verifies the leaf")
	}
}

func selfSigned(t *testing.T, isCA bool) ([]byte, []byte) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "given"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// A given CA: RSA (PKCS#1) and PKCS#8 keys load; a key of another certificate,
// a certificate that is not a CA's, and garbage are refused by name.
func TestLoadCA(t *testing.T) {
	cert, key := selfSigned(t, true)
	ca, err := LoadCA(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Leaf("x.test"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(cert, ca.KeyPEM()); err != nil {
		t.Errorf("PKCS#8: %v", err)
	}
	_, otherKey := selfSigned(t, true)
	for _, c := range []struct {
		cert, key []byte
		want      string
	}{
		{cert, otherKey, "the key is not the certificate's"},
		{func() []byte { c, _ := selfSigned(t, false); return c }(), key, "not a CA's"},
		{[]byte("junk"), key, "no PEM CERTIFICATE"},
		{cert, []byte("junk"), "no PEM block"},
	} {
		if _, err := LoadCA(c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

// The headers http_auth rules set.
func TestNewAuth(t *testing.T) {
	for _, c := range []struct{ rule, secret, header, value string }{
		{"POST api.test/* bearer k", "s3", "Authorization", "Bearer s3"},
		{"GET api.test basic k", "user:pw", "Authorization", "Basic dXNlcjpwdw=="},
		{"* api.test/* header:x-api-key k", "s3", "X-Api-Key", "s3"},
	} {
		a, prob := policy.ParseHTTPAuth(c.rule)
		if prob != "" {
			t.Fatalf("%s: %s", c.rule, prob)
		}
		got := NewAuth(a, c.secret)
		if got.Header != c.header || got.Value != c.value {
			t.Errorf("%s: %s: %s", c.rule, got.Header, got.Value)
		}
	}
	for _, bad := range []string{"POST api.test/* bearer", "POST api.test/* digest k", "POST api.test/* header: k", "POST https://api.test/* bearer k"} {
		if _, prob := policy.ParseHTTPAuth(bad); prob == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}
