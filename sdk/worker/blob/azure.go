package blob

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/lucius-platform/lucius/base/egress"
)

// CredentialMode says how the worker authenticates to Azure Storage
// (LUCIUS_BLOB_CREDENTIAL).
type CredentialMode string

// Credential modes.
const (
	// CredentialDefault is azidentity's DefaultAzureCredential: environment
	// variables (AZURE_CLIENT_ID, ...), workload identity, managed identity,
	// then developer tools such as the Azure CLI.
	CredentialDefault CredentialMode = "default"
	// CredentialWorkloadIdentity is Azure Workload Identity (AKS), from the
	// variables its webhook injects.
	CredentialWorkloadIdentity CredentialMode = "workload-identity"
	// CredentialManagedIdentity is the host's managed identity
	// (AZURE_CLIENT_ID selects a user-assigned one).
	CredentialManagedIdentity CredentialMode = "managed-identity"
	// CredentialSharedKey signs requests with the account keys the operator
	// configures (LUCIUS_BLOB_ACCOUNT_KEYS): Azurite, tests.
	CredentialSharedKey CredentialMode = "shared-key"
)

// Defaults for AzureConfig.
const (
	DefaultBlockSize   = 4 << 20
	MinBlockSize       = 1 << 20 // azblob's minimum
	MaxBlockSize       = 4000 << 20
	DefaultConcurrency = 4
	// DefaultEndpointSuffix makes an account's default endpoint,
	// https://<account>.blob.core.windows.net.
	DefaultEndpointSuffix = "blob.core.windows.net"
)

// AzureConfig configures the az:// store. Zero values take the defaults noted.
type AzureConfig struct {
	// Endpoints maps a storage account to its blob endpoint URL
	// (LUCIUS_BLOB_ENDPOINTS), e.g. devstoreaccount1 →
	// http://127.0.0.1:10000/devstoreaccount1 for Azurite, or an account of
	// a sovereign cloud. Default per account:
	// https://<account>.blob.core.windows.net. A configured endpoint whose
	// host is a literal address or localhost is allowed through the egress
	// policy (the operator named it); other internal addresses need
	// LUCIUS_EGRESS_ALLOW.
	Endpoints map[string]string
	// Credential is how requests authenticate. Default CredentialDefault.
	Credential CredentialMode
	// AccountKeys are the base64 shared keys by account, for
	// CredentialSharedKey only (LUCIUS_BLOB_ACCOUNT_KEYS).
	AccountKeys map[string]string
	// BlockSize is the size of each block a write uploads (default 4 MiB,
	// 1 MiB-4000 MiB); Concurrency how many blocks are in flight at once
	// (default 4). A write buffers at most BlockSize × Concurrency bytes.
	BlockSize   int64
	Concurrency int
}

// Validate reports every invalid setting.
func (c AzureConfig) Validate() error {
	var errs []error
	switch c.Credential {
	case "", CredentialDefault, CredentialWorkloadIdentity, CredentialManagedIdentity:
		if len(c.AccountKeys) > 0 {
			errs = append(errs, fmt.Errorf("account keys are set but the credential mode is %q: set it to %q to use them", c.mode(), CredentialSharedKey))
		}
	case CredentialSharedKey:
		if len(c.AccountKeys) == 0 {
			errs = append(errs, fmt.Errorf("credential mode %q needs account keys (LUCIUS_BLOB_ACCOUNT_KEYS)", CredentialSharedKey))
		}
	default:
		errs = append(errs, fmt.Errorf("credential mode %q: want %s, %s, %s or %s", Clip(string(c.Credential)),
			CredentialDefault, CredentialWorkloadIdentity, CredentialManagedIdentity, CredentialSharedKey))
	}
	for _, account := range slices.Sorted(maps.Keys(c.Endpoints)) {
		if err := checkAccount(account); err != nil {
			errs = append(errs, fmt.Errorf("endpoint: %w", err))
		}
		if _, err := parseEndpoint(c.Endpoints[account]); err != nil {
			errs = append(errs, fmt.Errorf("endpoint of %s: %w", account, err))
		}
	}
	for _, account := range slices.Sorted(maps.Keys(c.AccountKeys)) {
		if err := checkAccount(account); err != nil {
			errs = append(errs, fmt.Errorf("account key: %w", err))
		}
		if _, err := base64.StdEncoding.DecodeString(c.AccountKeys[account]); err != nil || c.AccountKeys[account] == "" {
			errs = append(errs, fmt.Errorf("account key of %s is not base64", account))
		}
	}
	if c.BlockSize != 0 && (c.BlockSize < MinBlockSize || c.BlockSize > MaxBlockSize) {
		errs = append(errs, fmt.Errorf("block size %d: want %d-%d bytes", c.BlockSize, MinBlockSize, int64(MaxBlockSize)))
	}
	if c.Concurrency < 0 || c.Concurrency > 64 {
		errs = append(errs, fmt.Errorf("concurrency %d: want 1-64", c.Concurrency))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	return nil
}

func (c AzureConfig) mode() CredentialMode {
	if c.Credential == "" {
		return CredentialDefault
	}
	return c.Credential
}

// parseEndpoint accepts an absolute http(s) URL without credentials, query
// or fragment.
func parseEndpoint(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("%q: want an http or https URL", Clip(s))
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%q: want no credentials, query or fragment", Clip(s))
	case u.Hostname() == "":
		return nil, fmt.Errorf("%q: has no host", Clip(s))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// ParseAccountMap reads "account=value,account=value" (LUCIUS_BLOB_ENDPOINTS,
// LUCIUS_BLOB_ACCOUNT_KEYS). Values may hold "=" (base64 keys do).
func ParseAccountMap(list string) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		account, value, ok := strings.Cut(item, "=")
		account, value = strings.TrimSpace(account), strings.TrimSpace(value)
		if !ok || account == "" || value == "" {
			// The item may be a key: never quote it.
			errs = append(errs, fmt.Errorf("item %d: want account=value", i+1))
			continue
		}
		if _, dup := out[account]; dup {
			errs = append(errs, fmt.Errorf("account %q is listed twice", Clip(account)))
		}
		out[account] = value
	}
	return out, errors.Join(errs...)
}

// Azure is the Store of az://account/container/path refs.
type Azure struct {
	cfg       AzureConfig
	transport *http.Client

	mu      sync.Mutex
	clients map[string]*azblob.Client
	token   azcore.TokenCredential // made on first use: building it can fail
}

var _ Store = (*Azure)(nil)

// NewAzure validates cfg and returns the az store. Every connection goes
// through policy's dialer, with the configured endpoints' literal hosts
// (and localhost) allowed besides, for this store only.
func NewAzure(cfg AzureConfig, policy egress.Policy) (*Azure, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	p := egress.Policy{Allow: slices.Clone(policy.Allow)}
	for _, account := range slices.Sorted(maps.Keys(cfg.Endpoints)) {
		u, _ := parseEndpoint(cfg.Endpoints[account])
		p.Allow = append(p.Allow, hostPrefixes(u.Hostname())...)
	}
	return &Azure{cfg: cfg, transport: p.Client(0, nil), clients: map[string]*azblob.Client{}}, nil
}

// hostPrefixes are the addresses a configured endpoint's host names
// literally: the address itself, or both loopbacks for localhost.
func hostPrefixes(host string) []netip.Prefix {
	host = strings.ToLower(strings.Trim(host, "[]"))
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		return []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	}
	return nil
}

// Endpoint is the blob endpoint of account.
func (a *Azure) Endpoint(account string) string {
	if e, ok := a.cfg.Endpoints[account]; ok {
		u, _ := parseEndpoint(e)
		return u.String()
	}
	return "https://" + account + "." + DefaultEndpointSuffix
}

// client returns the (shared, cached) client of ref's account.
func (a *Azure) client(account string) (*azblob.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[account]; ok {
		return c, nil
	}
	opts := &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: a.transport,
		Retry:     policy.RetryOptions{MaxRetries: 2, ShouldRetry: shouldRetry},
		// The worker logs its own failures with the job's attributes.
		Logging: policy.LogOptions{IncludeBody: false},
	}}
	endpoint := a.Endpoint(account) + "/"
	var (
		c   *azblob.Client
		err error
	)
	if a.cfg.mode() == CredentialSharedKey {
		key, ok := a.cfg.AccountKeys[account]
		if !ok {
			return nil, Permanent(CodeCredentialUnavailable, fmt.Errorf("storage account %s: no key is configured for it (LUCIUS_BLOB_ACCOUNT_KEYS) in credential mode %s",
				account, CredentialSharedKey))
		}
		cred, kerr := azblob.NewSharedKeyCredential(account, key)
		if kerr != nil {
			return nil, Permanent(CodeCredentialUnavailable, fmt.Errorf("storage account %s: %w", account, kerr))
		}
		c, err = azblob.NewClientWithSharedKeyCredential(endpoint, cred, opts)
	} else {
		if a.token == nil {
			if a.token, err = newTokenCredential(a.cfg.mode()); err != nil {
				return nil, Permanent(CodeCredentialUnavailable, fmt.Errorf("azure credential (%s): %w", a.cfg.mode(), err))
			}
		}
		c, err = azblob.NewClient(endpoint, a.token, opts)
	}
	if err != nil {
		return nil, Permanent(CodeInvalidRef, fmt.Errorf("storage account %s at %s: %w", account, endpoint, err))
	}
	a.clients[account] = c
	return c, nil
}

func newTokenCredential(mode CredentialMode) (azcore.TokenCredential, error) {
	switch mode {
	case CredentialWorkloadIdentity:
		return azidentity.NewWorkloadIdentityCredential(nil)
	case CredentialManagedIdentity:
		return azidentity.NewManagedIdentityCredential(nil)
	}
	return azidentity.NewDefaultAzureCredential(nil)
}

// shouldRetry retries what azcore would (transport errors, 408, 429, 5xx)
// except an address the egress policy refuses, which no retry changes.
func shouldRetry(resp *http.Response, err error) bool {
	if err != nil {
		return !errors.Is(err, egress.ErrForbidden)
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (a *Azure) blob(ref string) (AzureRef, *blockblob.Client, error) {
	r, err := ParseAzureRef(ref)
	if err != nil {
		return AzureRef{}, nil, err
	}
	if strings.HasSuffix(r.Blob, "/") {
		return AzureRef{}, nil, Permanent(CodeInvalidRef, fmt.Errorf("ref %q names a folder (it ends with /), not a blob", Clip(ref)))
	}
	c, err := a.client(r.Account)
	if err != nil {
		return AzureRef{}, nil, err
	}
	return r, c.ServiceClient().NewContainerClient(r.Container).NewBlockBlobClient(r.Blob), nil
}

// Open starts downloading ref. A missing blob is CodeInputNotFound, a
// missing container CodeContainerNotFound, a refused identity
// CodeAccessDenied (all permanent); a failing service is retryable.
func (a *Azure) Open(ctx context.Context, ref string) (Object, error) {
	r, bc, err := a.blob(ref)
	if err != nil {
		return nil, err
	}
	resp, err := bc.DownloadStream(ctx, nil)
	if err != nil {
		return nil, azureError("read", r, err)
	}
	size := int64(-1)
	if resp.ContentLength != nil {
		size = *resp.ContentLength
	}
	return &remoteObject{ref: r.String(), size: size, body: resp.NewRetryReader(ctx, &azblobblob.RetryReaderOptions{MaxRetries: 3}),
		// io.ReaderAt takes no context: ranges are fetched under Open's,
		// and an object lives no longer than the call that opened it.
		fetch: func(off, n int64) (io.ReadCloser, error) {
			resp, err := bc.DownloadStream(ctx, &azblobblob.DownloadStreamOptions{Range: azblobblob.HTTPRange{Offset: off, Count: n}})
			if err != nil {
				return nil, azureError("read", r, err)
			}
			return resp.NewRetryReader(ctx, &azblobblob.RetryReaderOptions{MaxRetries: 3}), nil
		},
		classify: func(err error) error { return azureError("read", r, err) },
	}, nil
}

// Write uploads r to ref in blocks of BlockSize, Concurrency at a time,
// committed at once (readers see the old blob or the new one whole), with
// the content type given. It never creates the container.
func (a *Azure) Write(ctx context.Context, ref string, r io.Reader, opts WriteOptions) (Written, error) {
	ar, bc, err := a.blob(ref)
	if err != nil {
		return Written{}, err
	}
	mediaType := opts.MediaType
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	counted := &hashingReader{r: r, h: sha256.New()}
	_, err = bc.UploadStream(ctx, counted, &blockblob.UploadStreamOptions{
		BlockSize: a.cfg.BlockSize, Concurrency: a.cfg.Concurrency,
		HTTPHeaders: &azblobblob.HTTPHeaders{BlobContentType: to.Ptr(mediaType)},
	})
	if err != nil {
		if counted.err != nil {
			// The source failed (or ctx ended), not the service.
			return Written{}, fmt.Errorf("write %s: %w", ar, counted.err)
		}
		return Written{}, azureError("write", ar, err)
	}
	return Written{URI: ar.String(), SizeBytes: counted.n, SHA256: hex.EncodeToString(counted.h.Sum(nil))}, nil
}

// hashingReader hashes and counts what passes through it and remembers its
// source's error.
type hashingReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	if err != nil && err != io.EOF {
		h.err = err
	}
	return n, err
}

// azureError classifies a storage failure.
func azureError(op string, r AzureRef, err error) error {
	err = fmt.Errorf("%s %s: %w", op, r, err)
	var respErr *azcore.ResponseError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return Permanent(CodeContainerNotFound, err)
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ResourceNotFound):
		return Permanent(CodeInputNotFound, err)
	case errors.Is(err, egress.ErrForbidden):
		return Permanent(CodeRefHostNotAllowed, err)
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Permanent(CodeInvalidRef, fmt.Errorf("storage account %s: its endpoint's host is not found: %w", r.Account, err))
	case errors.As(err, &respErr):
		switch {
		case respErr.StatusCode == http.StatusUnauthorized || respErr.StatusCode == http.StatusForbidden:
			return Permanent(CodeAccessDenied, err)
		case respErr.StatusCode == http.StatusNotFound:
			return Permanent(CodeInputNotFound, err)
		case shouldRetry(&http.Response{StatusCode: respErr.StatusCode}, nil):
			return Transient(CodeStorageUnavailable, err)
		case respErr.StatusCode >= 400 && respErr.StatusCode < 500:
			return Permanent(CodeInvalidRef, err)
		}
	}
	// Anything else, a failed token request included (a later attempt may
	// get one), may pass.
	return Transient(CodeStorageUnavailable, err)
}
