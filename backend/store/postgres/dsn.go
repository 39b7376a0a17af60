package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

func pgconnParse(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: bad DSN: %w", err)
	}
	return cfg, nil
}
