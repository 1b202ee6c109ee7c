package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles name a server's certificate and, for mTLS, the trust bundle its
// callers' client certificates must chain to.
type TLSFiles struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, lets callers authenticate with a client
	// certificate signed by one of its CAs (mTLS); callers without one may
	// still present a bearer token.
	ClientCAFile string
}

// Config loads the files; nil when no certificate is configured.
func (f TLSFiles) Config() (*tls.Config, error) {
	if f.CertFile == "" && f.KeyFile == "" {
		if f.ClientCAFile != "" {
			return nil, errors.New("tls: a client CA needs a server certificate and key")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", f.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// selfTLS is the client side of the REST→gRPC hop to the endpoint's own
// listener: it accepts exactly the endpoint's own certificate (pinned), so
// no name or CA needs to fit the loopback address.
func selfTLS(server *tls.Config) *tls.Config {
	own := server.Certificates[0].Certificate[0]
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // replaced by the pin below
		// VerifyConnection, unlike VerifyPeerCertificate, also runs on
		// resumed sessions.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, own) {
				return errors.New("tls: the endpoint's own gRPC listener presented another certificate")
			}
			return nil
		},
	}
}
