package worker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/env"
)

// callbackCredentials reads how the worker proves who it is to the
// orchestrators' CallbackService:
//
//	LUCIUS_AUTH_TOKEN_FILE            a bearer token (role worker, its services), re-read when the file changes
//	LUCIUS_CALLBACK_TLS_CA_FILE       CA bundle that signs the orchestrators' certificates (gRPC over TLS)
//	LUCIUS_CALLBACK_TLS_CERT_FILE,
//	LUCIUS_CALLBACK_TLS_KEY_FILE      a client certificate (mTLS) instead of, or as well as, the token
func callbackCredentials(e *env.Reader) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	tokenFile := e.String("LUCIUS_AUTH_TOKEN_FILE", "")
	caFile := e.String("LUCIUS_CALLBACK_TLS_CA_FILE", "")
	certFile, keyFile := e.String("LUCIUS_CALLBACK_TLS_CERT_FILE", ""), e.String("LUCIUS_CALLBACK_TLS_KEY_FILE", "")
	if tokenFile == "" && certFile == "" {
		return nil, errors.New("LUCIUS_AUTH_TOKEN_FILE or LUCIUS_CALLBACK_TLS_CERT_FILE is required: callbacks must authenticate")
	}
	if tokenFile != "" {
		creds, err := auth.NewTokenFile(tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(creds))
	}
	if caFile == "" && certFile == "" {
		return opts, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("callback TLS: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("callback TLS: %s holds no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("callback TLS: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg))), nil
}
