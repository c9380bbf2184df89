package httpproxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// HTTPS interception: the proxy answers the sandbox's TLS with a certificate for
// the server name it asked (SNI), minted on first use and cached, signed by the
// sandbox's CA; that CA is ephemeral (generated when the sandbox is built, its
// key only in this process's memory) or given (http_ca, http_key). The run trusts
// it through the bundles named by http_inject_ca (core/plan) or a file written
// to http_ca_out.

// Validity of an ephemeral CA and of the leaves (never past the CA's end).
const (
	caValidity   = 7 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	backdate     = time.Hour // clocks of the sandbox and the engine are one, but leaves minted now must be valid now
	maxLeaves    = 4096      // certificates cached; beyond, the cache starts over
)

// CA signs the leaf certificates of a sandbox's interception.
type CA struct {
	Cert    *x509.Certificate
	certDER []byte
	key     crypto.Signer

	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
	leafKey *ecdsa.PrivateKey // one key for every leaf (the CA's signature is what binds a name)
}

// NewCA generates an ephemeral CA: ECDSA P-256, valid for a week from an hour ago,
// allowed to sign server certificates only (no intermediate CAs).
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"sandtrap"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return newCA(der, key)
}

// LoadCA reads a CA from PEM: its certificate and its private key (PKCS#8, SEC 1
// EC or PKCS#1 RSA), which must match; the certificate must be a CA's.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("the certificate file holds no PEM CERTIFICATE")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("the key file holds no PEM block")
	}
	var key any
	var err error
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		return nil, fmt.Errorf("the key file's PEM block is %q, not a private key", kb.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("the key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	return newCA(cb.Bytes, signer)
}

func newCA(der []byte, key crypto.Signer) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("the certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 && cert.KeyUsage != 0 {
		return nil, errors.New("the certificate is not a CA's (basic constraints, key usage certSign)")
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the key is not the certificate's")
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("the certificate expired on %s", cert.NotAfter.Format(time.RFC3339))
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, certDER: der, key: key, leaves: map[string]*tls.Certificate{}, leafKey: leafKey}, nil
}

// PEM is the CA's certificate, PEM-encoded (what the run trusts).
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.certDER})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

// Leaf is the certificate for host (a DNS name, lower case), minted on first use.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	now := time.Now()
	if c, ok := ca.leaves[host]; ok && now.Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	end := now.Add(leafValidity)
	if end.After(ca.Cert.NotAfter) {
		end = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-backdate),
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.certDER}, PrivateKey: ca.leafKey, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// KeyPEM is the CA's private key, PKCS#8 PEM: for tests and for a caller that
// makes a CA to keep (the engine never writes an ephemeral CA's key).
func (ca *CA) KeyPEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
