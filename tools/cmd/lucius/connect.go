package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
)

// Config is the CLI's configuration file ($LUCIUS_CONFIG, else
// <user config dir>/lucius/config.yaml): named contexts, one current.
//
//	current-context: local
//	contexts:
//	  local:
//	    addr: 127.0.0.1:9090
//	    token-command: lucius token --role operator
//	  prod:
//	    addr: lucius.example.com:443
//	    tls: {ca-file: /etc/ssl/lucius-ca.pem}
//	    token-file: ~/.config/lucius/prod-token
type Config struct {
	CurrentContext string                    `yaml:"current-context"`
	Contexts       map[string]ContextOptions `yaml:"contexts"`
}

// ContextOptions say how to reach one Lucius gateway and authenticate.
type ContextOptions struct {
	// Addr is the gateway's gRPC target (host:port, or a gRPC target URI).
	Addr string `yaml:"addr"`
	// Token, TokenFile and TokenCommand are the bearer token's source: the
	// token itself, a file holding it, or a command printing it.
	Token        string `yaml:"token,omitempty"`
	TokenFile    string `yaml:"token-file,omitempty"`
	TokenCommand string `yaml:"token-command,omitempty"`
	// TLS turns on transport security; without it the connection is
	// plaintext (loopback, make up).
	TLS *TLSOptions `yaml:"tls,omitempty"`
}

// TLSOptions configure transport security to the gateway.
type TLSOptions struct {
	CAFile     string `yaml:"ca-file,omitempty"`
	ServerName string `yaml:"server-name,omitempty"`
}

// defaultAddr is make up's gateway.
const defaultAddr = "127.0.0.1:9090"

// configPath is where the configuration file is read.
func configPath() string {
	if p := os.Getenv("LUCIUS_CONFIG"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "lucius", "config.yaml")
}

// loadConfig reads the configuration file; a missing one is empty.
func loadConfig(path string) (Config, error) {
	var c Config
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// resolve picks the context (named, else the current one) and applies the
// LUCIUS_ADDR and LUCIUS_TOKEN overrides.
func (c Config) resolve(name string) (ContextOptions, error) {
	if name == "" {
		name = c.CurrentContext
	}
	var opts ContextOptions
	if name != "" {
		var ok bool
		if opts, ok = c.Contexts[name]; !ok {
			return opts, usageErrorf("no context %q in %s", name, configPath())
		}
	}
	if v := os.Getenv("LUCIUS_ADDR"); v != "" {
		opts.Addr = v
	}
	if v := os.Getenv("LUCIUS_TOKEN"); v != "" {
		opts.Token, opts.TokenFile, opts.TokenCommand = v, "", ""
	}
	if opts.Addr == "" {
		opts.Addr = defaultAddr
	}
	return opts, nil
}

// token reads the context's bearer token ("" when it names no source).
func (o ContextOptions) token(ctx context.Context) (string, error) {
	switch {
	case o.Token != "":
		return o.Token, nil
	case o.TokenFile != "":
		b, err := os.ReadFile(expandHome(o.TokenFile))
		if err != nil {
			return "", fmt.Errorf("token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	case o.TokenCommand != "":
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "sh", "-c", o.TokenCommand).Output()
		if err != nil {
			return "", fmt.Errorf("token-command %q: %w", o.TokenCommand, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	return "", nil
}

// dial connects to the context's gateway, with extra options.
func (o ContextOptions) dial(ctx context.Context, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := extra
	tok, err := o.token(ctx)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerToken(tok)))
	}
	if o.TLS != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLS.ServerName}
		if o.TLS.CAFile != "" {
			pem, err := os.ReadFile(expandHome(o.TLS.CAFile))
			if err != nil {
				return nil, fmt.Errorf("tls ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls ca-file %s holds no PEM certificate", o.TLS.CAFile)
			}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	return server.Dial(o.Addr, opts...)
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}
