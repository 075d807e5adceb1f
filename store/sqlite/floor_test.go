package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSelectFloor(t *testing.T) {
	f, err := OpenSelectFloor(filepath.Join(t.TempDir(), "floor.db"))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, f.Run(i))
	}
	require.NoError(t, f.Close())
}
