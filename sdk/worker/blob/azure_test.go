package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/lucius-platform/lucius/base/azuritetest"
	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// azure is an Azurite with a container "data" and the az store pointed at
// it with a shared key, as an operator configures it for local use.
type azure struct {
	server *azuritetest.Server
	store  *blob.Azure
	sdk    *azblob.Client // for checks from outside the store
}

func setupAzure(t *testing.T, cfg blob.AzureConfig) azure {
	t.Helper()
	az := azuritetest.Start(t)
	az.CreateContainer(t, "data")
	cfg.Endpoints = map[string]string{az.Account: az.Endpoint}
	if cfg.Credential == "" {
		cfg.Credential, cfg.AccountKeys = blob.CredentialSharedKey, map[string]string{az.Account: az.Key}
	}
	// The zero egress policy refuses loopback: only the configured endpoint
	// is reachable.
	store, err := blob.NewAzure(cfg, egress.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := azblob.NewSharedKeyCredential(az.Account, az.Key)
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := azblob.NewClientWithSharedKeyCredential(az.Endpoint+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return azure{server: az, store: store, sdk: sdk}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestAzureWritesBlobsWholeAndReadsThemBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := setupAzure(t, blob.AzureConfig{BlockSize: blob.MinBlockSize, Concurrency: 2})
	large := make([]byte, 3*blob.MinBlockSize+12345)
	rand.Read(large)
	for _, tc := range []struct {
		name, ref string
		data      []byte
		blocks    int // committed blocks; 0: uploaded in one request
	}{
		{"text", "az://devstoreaccount1/data/in.txt", []byte("Invoices are due within thirty days.\n"), 0},
		{"empty", "az://devstoreaccount1/data/empty.bin", nil, 0},
		{"escaped name", "az://devstoreaccount1/data/job%201/%C3%BCn%C3%AF%23.json", []byte(`{"a":1}`), 0},
		{"large, in blocks", "az://devstoreaccount1/data/large.bin", large, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := a.store.Write(ctx, tc.ref, bytes.NewReader(tc.data), blob.WriteOptions{MediaType: "text/plain"})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if w.SHA256 != sha(tc.data) || w.SizeBytes != int64(len(tc.data)) || w.URI != tc.ref {
				t.Errorf("Write = %+v; want sha256 %s, %d bytes, uri %s", w, sha(tc.data), len(tc.data), tc.ref)
			}
			obj, err := a.store.Open(ctx, tc.ref)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer obj.Close()
			got, err := io.ReadAll(obj)
			if err != nil || !bytes.Equal(got, tc.data) || obj.Size() != int64(len(tc.data)) {
				t.Fatalf("read back %d bytes (size %d), %v; want %d", len(got), obj.Size(), err, len(tc.data))
			}
			if len(tc.data) > 10 {
				part := make([]byte, 7)
				if n, err := obj.ReadAt(part, 3); err != nil || n != 7 || !bytes.Equal(part, tc.data[3:10]) {
					t.Errorf("ReadAt(3) = %d, %v: %q", n, err, part)
				}
				tail := make([]byte, 10)
				if n, err := obj.ReadAt(tail, int64(len(tc.data)-4)); n != 4 || !errors.Is(err, io.EOF) {
					t.Errorf("ReadAt past the end = %d, %v; want 4, EOF", n, err)
				}
			}
			r, _ := blob.ParseAzureRef(tc.ref)
			bc := a.sdk.ServiceClient().NewContainerClient(r.Container).NewBlockBlobClient(r.Blob)
			props, err := bc.GetProperties(ctx, nil)
			if err != nil || props.ContentType == nil || *props.ContentType != "text/plain" {
				t.Errorf("content type = %v, %v", props.ContentType, err)
			}
			list, err := bc.GetBlockList(ctx, blockblob.BlockListTypeCommitted, nil)
			if err != nil || len(list.CommittedBlocks) != tc.blocks {
				t.Errorf("committed blocks = %d, %v; want %d", len(list.CommittedBlocks), err, tc.blocks)
			}
		})
	}
	// A rewrite replaces the blob whole.
	if _, err := a.store.Write(ctx, "az://devstoreaccount1/data/in.txt", strings.NewReader("v2"), blob.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := blob.ReadAll(ctx, a.store, "az://devstoreaccount1/data/in.txt", 100); err != nil || string(got) != "v2" {
		t.Errorf("after rewrite: %q, %v", got, err)
	}
}

func TestAzureFailuresArePermanentOrRetryableWithTheirCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := setupAzure(t, blob.AzureConfig{})
	if _, err := a.store.Write(ctx, "az://devstoreaccount1/data/big.txt", strings.NewReader(strings.Repeat("x", 100)), blob.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	wrongKey, err := blob.NewAzure(blob.AzureConfig{Endpoints: map[string]string{a.server.Account: a.server.Endpoint},
		Credential: blob.CredentialSharedKey, AccountKeys: map[string]string{a.server.Account: "d3Jvbmcga2V5"}}, egress.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := azuritetest.Start(t)
	stopped.Stop()
	down, err := blob.NewAzure(blob.AzureConfig{Endpoints: map[string]string{stopped.Account: stopped.Endpoint},
		Credential: blob.CredentialSharedKey, AccountKeys: map[string]string{stopped.Account: stopped.Key}}, egress.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	read := func(s blob.Store, ref string) error { _, err := blob.ReadAll(ctx, s, ref, 10); return err }
	write := func(s blob.Store, ref string) error {
		_, err := s.Write(ctx, ref, strings.NewReader("x"), blob.WriteOptions{})
		return err
	}
	for _, tc := range []struct {
		name      string
		do        func(blob.Store, string) error
		store     blob.Store
		ref       string
		code      string
		retryable bool
	}{
		{"missing blob", read, a.store, "az://devstoreaccount1/data/missing.txt", blob.CodeInputNotFound, false},
		{"read from a missing container", read, a.store, "az://devstoreaccount1/nosuch/in.txt", blob.CodeContainerNotFound, false},
		{"write to a missing container", write, a.store, "az://devstoreaccount1/nosuch/out.txt", blob.CodeContainerNotFound, false},
		{"over the size limit", read, a.store, "az://devstoreaccount1/data/big.txt", blob.CodeInvalidInput, false},
		{"a folder, not a blob", read, a.store, "az://devstoreaccount1/data/dir/", blob.CodeInvalidRef, false},
		{"malformed ref", read, a.store, "az://devstoreaccount1/Data/x", blob.CodeInvalidRef, false},
		{"account without a key", read, a.store, "az://otheraccount/data/x", blob.CodeCredentialUnavailable, false},
		{"wrong key", read, wrongKey, "az://devstoreaccount1/data/big.txt", blob.CodeAccessDenied, false},
		{"wrong key, write", write, wrongKey, "az://devstoreaccount1/data/out.txt", blob.CodeAccessDenied, false},
		{"storage down", read, down, "az://devstoreaccount1/data/big.txt", blob.CodeStorageUnavailable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(tc.store, tc.ref)
			var be *blob.Error
			if !errors.As(err, &be) || be.Code != tc.code || be.Retryable != tc.retryable {
				t.Fatalf("error %v; want code %s, retryable %v", err, tc.code, tc.retryable)
			}
		})
	}
}

// The configured Azurite endpoint is reachable on loopback, but only for
// az:// refs: an https:// ref to the same address is refused by the egress
// policy the operator set (here the default, which allows no internal
// address).
func TestAzureEndpointAllowanceDoesNotOpenLoopbackToHTTPSRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := setupAzure(t, blob.AzureConfig{})
	if _, err := a.store.Write(ctx, "az://devstoreaccount1/data/x.txt", strings.NewReader("x"), blob.WriteOptions{}); err != nil {
		t.Fatalf("az write through the configured endpoint: %v", err)
	}
	https := blob.NewHTTPS(egress.Policy{})
	_, err := https.Open(ctx, strings.Replace(a.server.Endpoint, "http://", "https://", 1)+"/data/x.txt")
	if blob.CodeOf(err) != blob.CodeRefHostNotAllowed {
		t.Fatalf("https ref to the Azurite address: %v; want %s", err, blob.CodeRefHostNotAllowed)
	}
}

func TestAzureConfigValidateNamesEachProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  blob.AzureConfig
		want string // "" valid
	}{
		{"zero", blob.AzureConfig{}, ""},
		{"workload identity", blob.AzureConfig{Credential: blob.CredentialWorkloadIdentity}, ""},
		{"shared key", blob.AzureConfig{Credential: blob.CredentialSharedKey, AccountKeys: map[string]string{"acct01": "a2V5"}}, ""},
		{"unknown mode", blob.AzureConfig{Credential: "password"}, `credential mode "password"`},
		{"keys without shared-key", blob.AzureConfig{AccountKeys: map[string]string{"acct01": "a2V5"}}, "account keys are set"},
		{"shared-key without keys", blob.AzureConfig{Credential: blob.CredentialSharedKey}, "needs account keys"},
		{"key not base64", blob.AzureConfig{Credential: blob.CredentialSharedKey, AccountKeys: map[string]string{"acct01": "%%"}}, "not base64"},
		{"bad account", blob.AzureConfig{Endpoints: map[string]string{"Bad_Account": "http://127.0.0.1:1"}}, "storage account"},
		{"bad endpoint", blob.AzureConfig{Endpoints: map[string]string{"acct01": "ftp://x"}}, "want an http or https URL"},
		{"endpoint with a SAS", blob.AzureConfig{Endpoints: map[string]string{"acct01": "https://x/?sig=1"}}, "no credentials, query"},
		{"small blocks", blob.AzureConfig{BlockSize: 1024}, "block size"},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v; want %q", tc.name, err, tc.want)
		}
	}
}

func TestParseAccountMapReadsPairsAndRefusesMalformedOnes(t *testing.T) {
	t.Parallel()
	got, err := blob.ParseAccountMap(" devstoreaccount1=http://127.0.0.1:10000/devstoreaccount1 , acct02=a2V5== ,")
	if err != nil || len(got) != 2 || got["devstoreaccount1"] != "http://127.0.0.1:10000/devstoreaccount1" || got["acct02"] != "a2V5==" {
		t.Errorf("ParseAccountMap = %v, %v", got, err)
	}
	for _, bad := range []string{"acct01", "=x", "acct01=", "a=1,a=2"} {
		if _, err := blob.ParseAccountMap(bad); err == nil {
			t.Errorf("ParseAccountMap(%q) accepted", bad)
		}
	}
	// A key never appears in the error.
	if _, err := blob.ParseAccountMap("acct01 secretkey"); err == nil || strings.Contains(err.Error(), "secretkey") {
		t.Errorf("ParseAccountMap error leaks the value: %v", err)
	}
}
