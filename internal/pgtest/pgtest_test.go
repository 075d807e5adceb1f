package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// TestDatabase: each call gives a new, empty database of one running cluster, reachable over
// its socket only, by a server that does not run as root.
func TestDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := Database(t), Database(t)
	require.NotEqual(t, a, b)
	for _, u := range []string{a, b} {
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n))
		require.Zero(t, n, "a new database is empty")
		var addrs string
		require.NoError(t, conn.QueryRow(ctx, `SHOW listen_addresses`).Scan(&addrs))
		require.Empty(t, addrs, "no TCP listener")
		var dataDir string
		require.NoError(t, conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir))
		st, err := os.Stat(dataDir)
		require.NoError(t, err)
		require.NotZero(t, statUID(st), "the server does not run as root")
		require.NoError(t, conn.Close(ctx))
	}
}

// TestStartStop: Stop removes everything Start made.
func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		Unavailable(t, err)
	}
	u, err := c.CreateDatabase(ctx, "named")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, `SHOW fsync`).Scan(&fsync))
	require.Equal(t, "off", fsync)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, c.Stop())
	_, err = os.Stat(c.Dir)
	require.True(t, os.IsNotExist(err), "the cluster's directory is gone")
}
