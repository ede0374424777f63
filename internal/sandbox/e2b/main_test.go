package e2b_test

import (
	"testing"

	"github.com/proliferate/proliferate/internal/testenv"
)

// TestMain removes what the tests share (the CLI sandboxtest.CLI builds
// once for the fakes' templates) after the run.
func TestMain(m *testing.M) { testenv.Main(m) }
