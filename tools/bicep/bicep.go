// Package bicep renders a Bicep template of an Azure Service Bus namespace with
// the entities Lucius declares (package bus/topology, recorded by
// tools/busentity) and the same settings, so an infrastructure team can
// provision the namespace without running Lucius. The committed template,
// deploy/azure/servicebus.bicep, is checked current by this package's test.
package bicep

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/sbbus"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/tools/busentity"
)

// MaxResources is what one ARM deployment may hold (copy loops count each
// copy); Render refuses a topology that needs more.
const MaxResources = 800

// defaultRule is the rule Service Bus gives every new subscription; the
// template puts Lucius's filter in it (see the header).
const defaultRule = "$Default"

// Render returns the template for cfg.
func Render(cfg topology.Config) ([]byte, error) {
	if cfg.Topology == "" {
		cfg.Topology = routing.TopologyTwoTopicSets
	}
	set, err := busentity.Record(cfg)
	if err != nil {
		return nil, err
	}
	resources := 1 + len(set.Queues) + len(set.Topics) + 2*len(set.Subscriptions)
	if resources > MaxResources {
		return nil, fmt.Errorf("%d resources, more than the %d of one ARM deployment: split the template", resources, MaxResources)
	}
	var b strings.Builder
	fmt.Fprintf(&b, header, cfg.Topology, strings.Join(cfg.Services, ", "), sbbus.FilterRuleName, defaultRule, resources)
	b.WriteString(parameters)

	b.WriteString("\n// Entities, in the order bus/topology declares them.\nvar queues = [\n")
	for _, q := range set.Queues {
		fmt.Fprintf(&b, "  %s\n", literal(object{{"name", q.Name}, {"properties", queueProperties(q.Options)}}))
	}
	b.WriteString("]\n\nvar topics = [\n")
	for _, t := range set.Topics {
		fmt.Fprintf(&b, "  %s\n", literal(object{{"name", t.Name}, {"properties", topicProperties(t.Options)}}))
	}
	b.WriteString("]\n\n// A subscription's topic in topics, for its parent.\nvar topicIndex = {\n")
	for i, t := range set.Topics {
		fmt.Fprintf(&b, "  %s: %d\n", key(t.Name), i)
	}
	b.WriteString("}\n\n// Each subscription's one rule, named $Default (see the header).\nvar subscriptions = [\n")
	for _, s := range set.Subscriptions {
		fmt.Fprintf(&b, "  %s\n", literal(object{
			{"topic", s.Topic}, {"name", s.Name},
			{"properties", subscriptionProperties(s.Options)}, {"rule", ruleProperties(s.Options.Filter)},
		}))
	}
	b.WriteString("]\n")
	fmt.Fprintf(&b, resourcesAndOutputs, routing.Partitions, quote(defaultRule))
	return []byte(b.String()), nil
}

func queueProperties(o bus.QueueOptions) object {
	return object{
		{"lockDuration", busentity.ISODuration(o.LockDuration)},
		{"maxDeliveryCount", o.MaxDeliveryCount},
		{"defaultMessageTimeToLive", busentity.ISODuration(o.DefaultTTL)},
		{"deadLetteringOnMessageExpiration", o.DeadLetterOnExpiration},
		{"requiresDuplicateDetection", true},
		{"duplicateDetectionHistoryTimeWindow", busentity.ISODuration(o.DuplicateDetectionWindow)},
	}
}

func topicProperties(o bus.TopicOptions) object {
	return object{
		{"defaultMessageTimeToLive", busentity.ISODuration(o.DefaultTTL)},
		{"requiresDuplicateDetection", true},
		{"duplicateDetectionHistoryTimeWindow", busentity.ISODuration(o.DuplicateDetectionWindow)},
	}
}

// subscriptionProperties leaves out a zero DefaultTTL, as sbbus does: the
// subscription then keeps the topic's.
func subscriptionProperties(o bus.SubscriptionOptions) object {
	p := object{
		{"lockDuration", busentity.ISODuration(o.LockDuration)},
		{"maxDeliveryCount", o.MaxDeliveryCount},
	}
	if o.DefaultTTL > 0 {
		p = append(p, property{"defaultMessageTimeToLive", busentity.ISODuration(o.DefaultTTL)})
	}
	return append(p, property{"deadLetteringOnMessageExpiration", o.DeadLetterOnExpiration})
}

// ruleProperties is the rule sbbus declares for filter: a correlation filter on
// the application properties, or, for an empty filter, a TrueFilter, which ARM
// writes as the SQL filter 1=1.
func ruleProperties(filter map[string]string) object {
	if len(filter) == 0 {
		return object{{"filterType", "SqlFilter"}, {"sqlFilter", object{{"sqlExpression", "1=1"}}}}
	}
	keys := make([]string, 0, len(filter))
	for k := range filter {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	props := make(object, 0, len(keys))
	for _, k := range keys {
		props = append(props, property{k, filter[k]})
	}
	return object{{"filterType", "CorrelationFilter"}, {"correlationFilter", object{{"properties", props}}}}
}

// object is a Bicep object literal whose properties keep their order.
type object []property

type property struct {
	key   string
	value any
}

// literal writes v (a string, bool, int or object) as a one-line Bicep literal.
func literal(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case object:
		if len(v) == 0 {
			return "{}"
		}
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i] = key(p.key) + ": " + literal(p.value)
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	default:
		panic(fmt.Sprintf("bicep: no literal for %T", v))
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// key writes an object key: bare when it is an identifier, else quoted.
func key(k string) string {
	if identifier.MatchString(k) {
		return k
	}
	return quote(k)
}

// quote writes s as a Bicep string: single quotes, with \, ' and the ${ of
// interpolation escaped.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '$' && i+1 < len(s) && s[i+1] == '{':
			b.WriteString(`\$`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// header takes the topology, the services, sbbus's rule name, the default
// rule's name and the resource count.
const header = `// Code generated by go run ./tools/cmd/lucius-bicep (make bicep) from
// bus/topology. DO NOT EDIT.
//
// An Azure Service Bus namespace with every queue, topic, subscription and
// filter rule Lucius declares, with the settings Lucius gives them, for
// provisioning without running Lucius:
//
//   topology: %s (LUCIUS_TOPOLOGY must name the same)
//   services with directive subscriptions: %s
//
//   az deployment group create -g RG -f deploy/azure/servicebus.bicep -p namespaceName=NAME
//
// then run every process with LUCIUS_SERVICEBUS_PROVISION=false and
// LUCIUS_SERVICEBUS_NAMESPACE set to the fullyQualifiedNamespace output.
// make test fails when this file is not what the generator writes.
//
// Tier: Standard is the smallest with topics and limits a message, and so one
// batch of messages, to 256 KB; Premium raises the limit to 1 MB and beyond.
//
// Filter rules: Lucius gives each subscription one rule, %q, and
// deletes the %q rule (a TrueFilter) that Service Bus adds to every new
// subscription, since a subscription takes each message that any of its rules
// matches. A deployment cannot delete a rule it did not create, so this
// template declares $Default itself with Lucius's filter: the PUT replaces the
// TrueFilter in place, and each subscription has one rule with Lucius's filter
// under the other name (with provisioning off, Lucius checks that entities
// exist, not rule names). If a Lucius with provisioning on runs against this
// namespace, it adds its rule and deletes $Default, and a later deployment
// adds $Default back: two rules without actions that hold the same filter
// select what one does, one copy per message.
// Deploy before Lucius publishes: a new subscription takes every message until
// its $Default rule is replaced, moments later in the same deployment.
//
// Access: with provisioning off, the processes that publish (the reconciler's
// outbox dispatcher, the scheduler) need Azure Service Bus Data Sender and
// those that consume (orchestrators, workers, the reconciler's dead-letter
// collector) Azure Service Bus Data Receiver; senderPrincipalIds and
// receiverPrincipalIds grant them on the namespace. Data Owner is needed only
// by a Lucius that provisions the entities itself.
//
// Size: one deployment holds at most 800 resources; this template has %d,
// plus one per role assignment.
`

const parameters = `
@description('Name of the namespace: 6-50 letters, digits and hyphens, starting with a letter, unique in Azure.')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Region of the namespace.')
param location string = resourceGroup().location

@description('Standard is the smallest tier with topics (messages up to 256 KB); Premium raises the message size limit.')
@allowed([
  'Standard'
  'Premium'
])
param sku string = 'Standard'

@description('Messaging units of a Premium namespace; unused on Standard.')
@allowed([
  1
  2
  4
  8
  16
])
param premiumMessagingUnits int = 1

@description('Object ids of the service principals or managed identities that publish (the reconciler, the scheduler): Azure Service Bus Data Sender on the namespace.')
param senderPrincipalIds array = []

@description('Object ids of the service principals or managed identities that consume (orchestrators, workers, the reconciler): Azure Service Bus Data Receiver on the namespace.')
param receiverPrincipalIds array = []

var dataSenderRole = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39' // Azure Service Bus Data Sender
var dataReceiverRole = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0' // Azure Service Bus Data Receiver
`

// resourcesAndOutputs takes the batch size and the quoted rule name.
const resourcesAndOutputs = `
resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  sku: sku == 'Premium' ? { name: 'Premium', tier: 'Premium', capacity: premiumMessagingUnits } : { name: 'Standard', tier: 'Standard' }
}

resource queue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = [for q in queues: {
  parent: serviceBus
  name: q.name
  properties: q.properties
}]

resource topic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = [for t in topics: {
  parent: serviceBus
  name: t.name
  properties: t.properties
}]

// Service Bus may refuse concurrent changes under one topic (409 Conflict);
// in declaration order, consecutive subscriptions are on different topics.
@batchSize(%[1]d)
resource topicSubscription 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = [for s in subscriptions: {
  parent: topic[topicIndex[s.topic]]
  name: s.name
  properties: s.properties
}]

@batchSize(%[1]d)
resource filterRule 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for (s, i) in subscriptions: {
  parent: topicSubscription[i]
  name: %[2]s
  properties: s.rule
}]

resource sender 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in senderPrincipalIds: {
  scope: serviceBus
  name: guid(serviceBus.id, principalId, dataSenderRole)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSenderRole)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

resource receiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in receiverPrincipalIds: {
  scope: serviceBus
  name: guid(serviceBus.id, principalId, dataReceiverRole)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataReceiverRole)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

output namespaceName string = serviceBus.name
output serviceBusEndpoint string = serviceBus.properties.serviceBusEndpoint
@description('The host in serviceBusEndpoint, for LUCIUS_SERVICEBUS_NAMESPACE.')
output fullyQualifiedNamespace string = split(split(serviceBus.properties.serviceBusEndpoint, '/')[2], ':')[0]
`
