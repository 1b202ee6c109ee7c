package bus

import (
	"fmt"
	"regexp"
	"strings"
)

// Azure Service Bus naming rules, plus: a queue or topic name may not contain
// a "/subscriptions/" segment, which would make its path ambiguous. Every
// implementation checks names with them, so a name one bus takes the others
// take too.
var (
	entityName       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,259}$`)
	subscriptionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$`)
)

// CheckEntityName reports whether name may name a queue or topic.
func CheckEntityName(name string) error {
	if !entityName.MatchString(name) || strings.HasSuffix(name, "/") || strings.Contains(name, "/subscriptions/") {
		return fmt.Errorf("invalid entity name %q: use 1-260 letters, digits, '.', '-', '_' or '/'", name)
	}
	return nil
}

// CheckSubscriptionName reports whether name may name a subscription.
func CheckSubscriptionName(name string) error {
	if !subscriptionName.MatchString(name) {
		return fmt.Errorf("invalid subscription name %q: use 1-50 letters, digits, '.', '-' or '_'", name)
	}
	return nil
}
