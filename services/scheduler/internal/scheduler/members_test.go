package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// A member that appears in a live batch is added with member-added, one the
// data no longer returns is removed with member-removed, and one that comes
// back gets its row back and a new member-added (a new message id: the time
// of the change). Ticking without changes emits nothing.
func TestMembersAddedRemovedAndAddedAgain(t *testing.T) {
	t.Parallel()
	for _, init := range []bool{false, true} {
		t.Run(fmt.Sprintf("init %v", init), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.apply(spec{init: init}) // with init the batch stays init_dispatched: members are followed there too
			f.load("mailbox-move", 1, members(3, start))
			f.tick()

			// u04 joins.
			f.clock.Advance(time.Minute)
			addedAt := f.clock.Now()
			f.load("mailbox-move", 1, members(4, start))
			f.tick()
			f.tick()
			equal(t, "added", f.ids(runbook.EventMemberAdded), []string{fmt.Sprintf("member-added/4/%d", addedAt.UnixNano())})
			body := f.messages(runbook.EventMemberAdded)[0].Body
			if body["batchMemberId"] != 4.0 || body["memberKey"] != "u04" || body["batchId"] != 1.0 ||
				body["runbookName"] != "mailbox-move" || body["runbookVersion"] != 1.0 {
				t.Fatalf("member-added %v", body)
			}
			equal(t, "u04", f.strs(`SELECT status || ' ' || (add_dispatched_at = $1) FROM batch_members WHERE id = 4`, addedAt),
				[]string{"active true"})

			// u02 leaves.
			f.clock.Advance(time.Minute)
			removedAt := f.clock.Now()
			f.load("mailbox-move", 1, []runbook.Member{mbr("u01", start), mbr("u03", start), mbr("u04", start)})
			f.tick()
			f.tick()
			equal(t, "removed", f.ids(runbook.EventMemberRemoved), []string{fmt.Sprintf("member-removed/2/%d", removedAt.UnixNano())})
			equal(t, "u02", f.strs(`SELECT status || ' ' || (removed_at = $1) || ' ' || (remove_dispatched_at = $1)
				FROM batch_members WHERE id = 2`, removedAt), []string{"removed true true"})

			// u02 comes back: the same row, active again, and a new member-added.
			f.clock.Advance(time.Minute)
			backAt := f.clock.Now()
			f.load("mailbox-move", 1, members(4, start))
			f.tick()
			f.tick()
			equal(t, "added", f.ids(runbook.EventMemberAdded), []string{fmt.Sprintf("member-added/4/%d", addedAt.UnixNano()),
				fmt.Sprintf("member-added/2/%d", backAt.UnixNano())})
			equal(t, "u02", f.strs(`SELECT status || ' ' || (removed_at IS NULL) || ' ' || (add_dispatched_at = $1)
				FROM batch_members WHERE id = 2`, backAt), []string{"active true true"})
			if n := f.count(`SELECT count(*) FROM batch_members`); n != 4 {
				t.Fatalf("%d batch_members rows, want 4", n)
			}
			if n := len(f.messages("")); n != 3+boolInt(init) {
				t.Fatalf("%d events, want %d", n, 3+boolInt(init))
			}
		})
	}
}

// A member whose batch time changes leaves its batch (member-removed) and
// is a member of the batch of its new time.
func TestMemberMovingToAnotherBatchTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	later := start.Add(24 * time.Hour)
	f.load("mailbox-move", 1, append(members(2, start), mbr("w01", later)))
	f.tick()
	f.clock.Advance(time.Minute)
	f.load("mailbox-move", 1, []runbook.Member{mbr("u01", start), mbr("u02", later), mbr("w01", later)})
	f.tick()
	first, second := f.batchID(start), f.batchID(later)
	equal(t, "first batch", f.strs(`SELECT member_key || ' ' || status FROM batch_members WHERE batch_id = $1 ORDER BY id`, first),
		[]string{"u01 active", "u02 removed"})
	equal(t, "second batch", f.strs(`SELECT member_key || ' ' || status FROM batch_members WHERE batch_id = $1 ORDER BY id`, second),
		[]string{"w01 active", "u02 active"})
	if got := len(f.ids(runbook.EventMemberRemoved)); got != 1 {
		t.Fatalf("%d member-removed, want 1", got)
	}
	if got := len(f.ids(runbook.EventMemberAdded)); got != 1 {
		t.Fatalf("%d member-added, want 1", got)
	}
}

// Finished batches are not followed.
func TestMembersOfFinishedBatchesAreNotFollowed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(spec{})
	f.load("mailbox-move", 1, members(2, start))
	f.tick()
	f.exec(`UPDATE batches SET status = 'completed'`)
	f.load("mailbox-move", 1, []runbook.Member{mbr("u01", start), mbr("u09", start)})
	f.tick()
	if got := f.ids(""); len(got) != 0 {
		t.Fatalf("events for a completed batch: %v", got)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
