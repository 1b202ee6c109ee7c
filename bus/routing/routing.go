// Package routing maps a job to its lane, partition and topic (seed 004 §6, as
// settled in ARCHITECTURE.md "Routing"). The rule is a contract pinned by the
// golden vectors in testdata/vectors.json; it must never change:
//
//	tenant_norm      = lower(trim(tenant_id))       (Unicode, UTF-8)
//	doc_norm         = lower(trim(doc_id))
//	routing_key_used = tenant_norm                  (DEFAULT)
//	                 = tenant_norm + doc_norm       (BURST, plain concatenation)
//	partition        = CRC32-IEEE(routing_key_used) % 16
//	topic            = global-default-p{partition} | global-burst-p{partition}
//	                   (two topic sets, the default), or global-bus-p{partition}
//	                   with a lane property (one topic set)
//
// trim removes Unicode White_Space at both ends (strings.TrimSpace); lower is
// Unicode simple case mapping (strings.ToLower).
package routing

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Partitions is the fixed number of directive partitions per lane.
const Partitions = 16

// Mode is a lane: DEFAULT (sticky per tenant) or BURST (spread by document).
type Mode string

// The two modes. SAFE is accepted as an alias of DEFAULT by ParseMode.
const (
	ModeDefault Mode = "DEFAULT"
	ModeBurst   Mode = "BURST"
)

// ParseMode reads a mode name, case-insensitively; "SAFE" means DEFAULT.
func ParseMode(s string) (Mode, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "DEFAULT", "SAFE":
		return ModeDefault, nil
	case "BURST":
		return ModeBurst, nil
	}
	return "", fmt.Errorf("unknown mode %q (want DEFAULT or BURST)", s)
}

// Lane is the lowercase lane name used in topic names and the lane property.
func (m Mode) Lane() string { return strings.ToLower(string(m)) }

// Topology chooses how lanes map to topics.
type Topology string

// Topologies: two topic sets (the default, hard isolation) or one set with a
// lane property and per-lane subscriptions (soft isolation).
const (
	TopologyTwoTopicSets Topology = "two-topic-sets"
	TopologyOneTopicSet  Topology = "one-topic-set"
)

// ParseTopology reads a topology name; empty means two topic sets.
func ParseTopology(s string) (Topology, error) {
	switch Topology(strings.TrimSpace(s)) {
	case "", TopologyTwoTopicSets:
		return TopologyTwoTopicSets, nil
	case TopologyOneTopicSet:
		return TopologyOneTopicSet, nil
	}
	return "", fmt.Errorf("unknown topology %q (want %s or %s)", s, TopologyTwoTopicSets, TopologyOneTopicSet)
}

// Source says which setting decided the mode.
type Source string

// Decision sources in precedence order.
const (
	SourceRequest      Source = "REQUEST"
	SourceTenantConfig Source = "TENANT_CONFIG"
	SourceGlobalConfig Source = "GLOBAL_CONFIG"
)

// Errors of Resolve, each with its own reason for the caller.
var (
	ErrBurstWithoutDocID = errors.New("BURST mode requires doc_id")
	ErrBurstForbidden    = errors.New("tenant is not allowed to use BURST mode")
	ErrEmptyTenant       = errors.New("tenant_id is empty after trimming")
)

// Input is what a routing decision depends on.
type Input struct {
	TenantID string
	DocID    string
	// Requested is the mode on the request; empty when the request has none.
	Requested Mode
	// TenantDefault is the tenant's configured mode; empty when it has none.
	TenantDefault Mode
	// GlobalDefault is the global default mode; empty means DEFAULT.
	GlobalDefault Mode
	// BurstForbidden rejects BURST for this tenant.
	BurstForbidden bool
	Topology       Topology
}

// Decision is a resolved, pinnable route.
type Decision struct {
	Mode       Mode
	Partition  int
	RoutingKey string
	Topic      string
	Source     Source
	Reason     string
}

// Normalize is lower(trim(s)).
func Normalize(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// Key returns the routing key for a mode.
func Key(mode Mode, tenantID, docID string) string {
	if mode == ModeBurst {
		return Normalize(tenantID) + Normalize(docID)
	}
	return Normalize(tenantID)
}

// Partition is CRC32-IEEE(key) % Partitions.
func Partition(key string) int { return int(crc32.ChecksumIEEE([]byte(key)) % Partitions) }

// Topic names the topic a partition of a lane publishes to.
func Topic(topology Topology, mode Mode, partition int) string {
	if topology == TopologyOneTopicSet {
		return fmt.Sprintf("global-bus-p%d", partition)
	}
	return fmt.Sprintf("global-%s-p%d", mode.Lane(), partition)
}

// Resolve chooses the mode (request, then tenant configuration, then the global
// default) and derives the route.
func Resolve(in Input) (Decision, error) {
	if Normalize(in.TenantID) == "" {
		return Decision{}, ErrEmptyTenant
	}
	var d Decision
	switch {
	case in.Requested != "":
		d.Mode, d.Source, d.Reason = in.Requested, SourceRequest, "mode set on request"
	case in.TenantDefault != "":
		d.Mode, d.Source, d.Reason = in.TenantDefault, SourceTenantConfig, "tenant configuration default"
	case in.GlobalDefault != "":
		d.Mode, d.Source, d.Reason = in.GlobalDefault, SourceGlobalConfig, "global default mode"
	default:
		d.Mode, d.Source, d.Reason = ModeDefault, SourceGlobalConfig, "built-in default mode"
	}
	if d.Mode == ModeBurst {
		if in.BurstForbidden {
			return Decision{}, ErrBurstForbidden
		}
		if Normalize(in.DocID) == "" {
			return Decision{}, ErrBurstWithoutDocID
		}
	}
	topology := in.Topology
	if topology == "" {
		topology = TopologyTwoTopicSets
	}
	d.RoutingKey = Key(d.Mode, in.TenantID, in.DocID)
	d.Partition = Partition(d.RoutingKey)
	d.Topic = Topic(topology, d.Mode, d.Partition)
	return d, nil
}
