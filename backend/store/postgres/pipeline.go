package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"ludus.dev/ludus/backend/store/sqlstore"
)

// pipeline is sqlstore.Dialect.Pipeline: a pgx batch, sent in one round
// trip with one Sync at its end, so that PostgreSQL skips the statements
// after one that fails. A statement is named as the one that failed only
// if PostgreSQL refused it, or its Rows or Tag did: any other error (the
// connection, the context) may have come after a COMMIT in the batch ran,
// so it is the whole batch's.
func pipeline(ctx context.Context, driverConn any, stmts []sqlstore.PipeStmt) (failed int, err error) {
	c, ok := driverConn.(*stdlib.Conn)
	if !ok {
		return -1, fmt.Errorf("postgres: pipeline on a %T", driverConn)
	}
	var b pgx.Batch
	for _, st := range stmts {
		b.Queue(st.Query, st.Args...)
	}
	br := c.Conn().SendBatch(ctx, &b)
	failed = -1
stmts:
	for i, st := range stmts {
		var serr error // an error of st's Rows or Tag
		if st.Rows != nil {
			rows, qerr := br.Query()
			if qerr == nil {
				serr = st.Rows(rows)
				rows.Close()
				qerr = rows.Err()
			}
			err = qerr
		} else {
			var tag pgconn.CommandTag
			tag, err = br.Exec()
			if err == nil && st.Tag != nil {
				serr = st.Tag(tag.String())
			}
		}
		var pe *pgconn.PgError
		switch {
		case err != nil && errors.As(err, &pe):
			failed = i
		case err != nil:
		case serr != nil:
			failed, err = i, serr
		default:
			continue
		}
		break stmts
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		failed = -1
	}
	return failed, err
}
