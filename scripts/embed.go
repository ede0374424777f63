// Package scripts carries the shell scripts the binary runs wherever it is
// started, not only inside a checkout.
package scripts

import _ "embed"

// OpenCode is scripts/opencode.sh: it installs the pinned OpenCode agent and
// its plugin SDK into the shared tools cache and prints their paths.
//
//go:embed opencode.sh
var OpenCode string
