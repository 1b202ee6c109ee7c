package pgbus

// Claims counts the claim statements b ran.
func (b *Bus) Claims() int64 { return b.claims.Load() }
func (b *Bus) Polls() int64  { return b.polls.Load() }
