package webhooks

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/webhooks/internal/dbsqlc"
)

// DeleteExpired deletes, in tx, up to limit processed receipts received at
// or before cutoff, oldest first, and reports how many it deleted: one batch
// of the retention sweeper. An unprocessed receipt is never deleted, and a
// receipt another transaction holds (a worker applying it) is skipped for
// the next batch.
func DeleteExpired(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (int64, error) {
	return dbsqlc.New(tx).WebhookReceiptDeleteProcessed(ctx, dbsqlc.WebhookReceiptDeleteProcessedParams{Cutoff: cutoff, MaxRows: int32(limit)}) // #nosec G115 -- limit is the sweeper's batch size, at most 100,000 (app.Tuning)
}
