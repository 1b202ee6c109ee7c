package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipeTx is a transaction on one pooled connection that holds back what needs
// no answer yet (BEGIN, and row writes) and sends it in one pipelined batch
// with the next statement that must answer: a read, a COPY, or the writes
// at commit with the COMMIT itself. The server sees the same statements in
// the same order; the process waits for the database once per answer
// instead of once per statement. On a busy machine each wait is a wake-up
// of the backend and then of this process, which is where a callback's or a
// submit's time and CPU went.
//
// A held write that fails reports its error at the next answer instead of
// at its call; every caller returns such errors and the transaction rolls
// back, so only when the error is seen moves. Checks on held writes (one row
// touched, an admission within its limit) are raised by the statements
// themselves, so a failed check aborts the transaction before a COMMIT sent
// in the same batch can run.
//
// pipeTx implements pgx.Tx for code that keeps its own tables in the
// ledger's database (Tx.SQL); nested transactions and large objects are not
// supported.
type pipeTx struct {
	conn    *pgxpool.Conn
	held    []heldStmt
	begun   bool // BEGIN reached the server
	settled bool // committed or rolled back; the connection is returned
}

// heldStmt is a statement sent later; what names it in errors.
type heldStmt struct {
	sql  string
	args []any
	what string
}

func beginPipe(ctx context.Context, pool *pgxpool.Pool) (*pipeTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeTx{conn: conn, held: []heldStmt{{sql: "begin", what: "begin"}}}, nil
}

// hold queues a write to go with the next statement that answers.
func (p *pipeTx) hold(what, sql string, args ...any) {
	p.held = append(p.held, heldStmt{sql: sql, args: args, what: what})
}

// holdOne queues a write (an UPDATE or DELETE without RETURNING) that must
// touch exactly one row; otherwise the transaction fails with ErrNotFound.
func (p *pipeTx) holdOne(what, sql string, args ...any) {
	n := len(args)
	p.hold(what, fmt.Sprintf(`WITH w AS (%s RETURNING 1) SELECT lucius_expect_row(count(*), $%d) FROM w`, sql, n+1),
		append(args, what)...)
}

// codeNoRow is the SQLSTATE lucius_expect_row raises (no_data_found).
const codeNoRow = "P0002"

// send sends the held statements, then b's (nil: none), in one batch and
// returns the results positioned at b's first statement.
func (p *pipeTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	held := p.held
	p.held = nil
	all := &pgx.Batch{}
	for _, h := range held {
		all.Queue(h.sql, h.args...)
	}
	if b != nil {
		all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	}
	br := p.conn.SendBatch(ctx, all)
	for _, h := range held {
		if _, err := br.Exec(); err != nil {
			br.Close() //nolint:errcheck // the first error is the one to report
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == codeNoRow {
				err = ErrNotFound
			}
			return nil, fmt.Errorf("%s: %w", h.what, err)
		}
		if h.sql == "begin" {
			p.begun = true
		}
	}
	return br, nil
}

// sendWith sends what is held, then one statement, and returns the results
// positioned at that statement.
func (p *pipeTx) sendWith(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return p.send(ctx, b)
}

// sendHeld sends what is held, alone.
func (p *pipeTx) sendHeld(ctx context.Context) error {
	if len(p.held) == 0 {
		return nil
	}
	br, err := p.send(ctx, nil)
	if err != nil {
		return err
	}
	return br.Close()
}

func (p *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(p.held) == 0 {
		return p.conn.Exec(ctx, sql, args...)
	}
	br, err := p.sendWith(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (p *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if len(p.held) == 0 {
		return p.conn.Query(ctx, sql, args...)
	}
	br, err := p.sendWith(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close() //nolint:errcheck
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(p.held) == 0 {
		return p.conn.QueryRow(ctx, sql, args...)
	}
	br, err := p.sendWith(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// SendBatch sends what is held ahead of b; the results start at b's first
// statement, and a held statement's failure is reported by every read.
func (p *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br, err := p.send(ctx, b)
	if err != nil {
		return errBatch{err}
	}
	return br
}

func (p *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := p.sendHeld(ctx); err != nil {
		return 0, err
	}
	return p.conn.CopyFrom(ctx, table, columns, src)
}

func (p *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := p.sendHeld(ctx); err != nil {
		return nil, err
	}
	return p.conn.Conn().Prepare(ctx, name, sql)
}

func (p *pipeTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("ledger transactions do not nest")
}

func (p *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (p *pipeTx) Conn() *pgx.Conn { return p.conn.Conn() }

// Commit commits what is held and sent.
func (p *pipeTx) Commit(ctx context.Context) error { return p.commitWith(ctx, nil) }

// commitWith sends what is held, then b's statements (nil: none), then
// COMMIT, in one batch, and returns the first error. b's statements must
// raise their failures: the COMMIT runs unless one did. A transaction that
// never reached the server and has nothing to write has nothing to commit.
// After an error the transaction is still open, for Rollback.
func (p *pipeTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	if p.settled {
		return pgx.ErrTxClosed
	}
	if b == nil {
		b = &pgx.Batch{}
	}
	if !p.begun && len(p.held) <= 1 && b.Len() == 0 {
		p.release() // only BEGIN is held: nothing was read or written
		return nil
	}
	queueExec(b, "commit", "commit")
	br, err := p.send(ctx, b)
	if err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	p.release()
	return nil
}

// Rollback ends the transaction unless it was committed; like pgx's, it is
// safe to defer.
func (p *pipeTx) Rollback(ctx context.Context) error {
	if p.settled {
		return pgx.ErrTxClosed
	}
	defer p.release()
	if !p.begun {
		return nil
	}
	_, err := p.conn.Exec(ctx, "rollback")
	return err
}

// release returns the connection; the pool closes it if it is still inside a
// transaction (a rollback that failed with its context).
func (p *pipeTx) release() {
	p.settled = true
	p.held = nil
	p.conn.Release()
}

// batchRows closes its batch with its rows.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow closes its batch once scanned.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
