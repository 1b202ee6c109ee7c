package routing

import (
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"testing"
	"unicode/utf8"
)

type vector struct {
	Name           string `json:"name"`
	TenantID       string `json:"tenant_id"`
	DocID          string `json:"doc_id"`
	Mode           Mode   `json:"mode"`
	RoutingKey     string `json:"routing_key_used"`
	CRC32          uint32 `json:"crc32"`
	Partition      int    `json:"partition"`
	Topic          string `json:"topic"`
	SingleSetTopic string `json:"single_set_topic"`
}

// The vectors were computed outside Go (Python's zlib.crc32) and are the routing
// contract: a failure here means the rule changed, which it must never do.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []vector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 25 {
		t.Fatalf("only %d golden vectors; the contract needs at least 25", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			d, err := Resolve(Input{TenantID: v.TenantID, DocID: v.DocID, Requested: v.Mode})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if d.RoutingKey != v.RoutingKey {
				t.Errorf("routing key %q, want %q", d.RoutingKey, v.RoutingKey)
			}
			if got := crc32.ChecksumIEEE([]byte(d.RoutingKey)); got != v.CRC32 {
				t.Errorf("crc32 %d, want %d", got, v.CRC32)
			}
			if d.Partition != v.Partition || d.Topic != v.Topic {
				t.Errorf("partition %d topic %s, want %d %s", d.Partition, d.Topic, v.Partition, v.Topic)
			}
			single, err := Resolve(Input{TenantID: v.TenantID, DocID: v.DocID, Requested: v.Mode, Topology: TopologyOneTopicSet})
			if err != nil {
				t.Fatal(err)
			}
			if single.Topic != v.SingleSetTopic || single.Partition != v.Partition {
				t.Errorf("one-topic-set topic %s, want %s", single.Topic, v.SingleSetTopic)
			}
		})
	}
}

func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         Input
		wantMode   Mode
		wantSource Source
	}{
		{"request wins over tenant and global", Input{TenantID: "a", DocID: "d", Requested: ModeBurst, TenantDefault: ModeDefault, GlobalDefault: ModeDefault}, ModeBurst, SourceRequest},
		{"tenant wins over global", Input{TenantID: "a", DocID: "d", TenantDefault: ModeBurst, GlobalDefault: ModeDefault}, ModeBurst, SourceTenantConfig},
		{"global when nothing else", Input{TenantID: "a", DocID: "d", GlobalDefault: ModeBurst}, ModeBurst, SourceGlobalConfig},
		{"built-in DEFAULT when nothing is configured", Input{TenantID: "a"}, ModeDefault, SourceGlobalConfig},
		{"request DEFAULT overrides tenant BURST", Input{TenantID: "a", Requested: ModeDefault, TenantDefault: ModeBurst}, ModeDefault, SourceRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := Resolve(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tt.wantMode || d.Source != tt.wantSource || d.Reason == "" {
				t.Fatalf("got %s/%s (%q), want %s/%s", d.Mode, d.Source, d.Reason, tt.wantMode, tt.wantSource)
			}
		})
	}
}

func TestResolveRejections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Input
		want error
	}{
		{"burst without doc", Input{TenantID: "a", Requested: ModeBurst}, ErrBurstWithoutDocID},
		{"burst with blank doc", Input{TenantID: "a", DocID: " \t", Requested: ModeBurst}, ErrBurstWithoutDocID},
		{"burst from tenant config without doc", Input{TenantID: "a", TenantDefault: ModeBurst}, ErrBurstWithoutDocID},
		{"burst forbidden for tenant", Input{TenantID: "a", DocID: "d", Requested: ModeBurst, BurstForbidden: true}, ErrBurstForbidden},
		{"blank tenant", Input{TenantID: "   "}, ErrEmptyTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Resolve(tt.in); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Mode{"DEFAULT": ModeDefault, "safe": ModeDefault, " Burst ": ModeBurst} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseMode("FAST"); err == nil {
		t.Error("ParseMode(FAST) accepted an unknown mode")
	}
}

// FuzzResolve checks the invariants of the rule for any input: the partition is
// in range and matches the key's CRC, the topic names the partition, DEFAULT
// ignores the document, and BURST keys start with the tenant key.
func FuzzResolve(f *testing.F) {
	f.Add("acme", "doc-1", true)
	f.Add(" Müller ", "", false)
	f.Add("", "x", true)
	f.Fuzz(func(t *testing.T, tenant, doc string, burst bool) {
		mode := ModeDefault
		if burst {
			mode = ModeBurst
		}
		d, err := Resolve(Input{TenantID: tenant, DocID: doc, Requested: mode})
		if err != nil {
			return
		}
		if d.Partition < 0 || d.Partition >= Partitions {
			t.Fatalf("partition %d out of range", d.Partition)
		}
		if int(crc32.ChecksumIEEE([]byte(d.RoutingKey))%Partitions) != d.Partition {
			t.Fatalf("partition does not match CRC of key %q", d.RoutingKey)
		}
		if d.Topic != Topic(TopologyTwoTopicSets, d.Mode, d.Partition) {
			t.Fatalf("topic %s does not name partition %d", d.Topic, d.Partition)
		}
		tenantKey := Normalize(tenant)
		if mode == ModeDefault && d.RoutingKey != tenantKey {
			t.Fatalf("DEFAULT key %q, want tenant key %q", d.RoutingKey, tenantKey)
		}
		if mode == ModeBurst && (len(d.RoutingKey) < len(tenantKey) || d.RoutingKey[:len(tenantKey)] != tenantKey) {
			t.Fatalf("BURST key %q does not start with tenant key %q", d.RoutingKey, tenantKey)
		}
		if utf8.ValidString(tenant) && utf8.ValidString(doc) && !utf8.ValidString(d.RoutingKey) {
			t.Fatalf("valid UTF-8 input gave invalid key %q", d.RoutingKey)
		}
	})
}
