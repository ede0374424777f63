package topics_test

// The catalog's consumer groups are the ones the consumers/<group>
// packages linked into a binary define. These tests link every one, as the
// proliferate binary does (app wires them all), so that the
// catalog checks and docs/topics.md see every group.
import (
	_ "github.com/proliferate/proliferate/consumers/actionmaterializer"
	_ "github.com/proliferate/proliferate/consumers/billingledger"
	_ "github.com/proliferate/proliferate/consumers/billingrater"
	_ "github.com/proliferate/proliferate/consumers/enforcer"
	_ "github.com/proliferate/proliferate/consumers/notifier"
	_ "github.com/proliferate/proliferate/consumers/runartifacts"
	_ "github.com/proliferate/proliferate/consumers/runstages"
	_ "github.com/proliferate/proliferate/consumers/sessionmaterializer"
	_ "github.com/proliferate/proliferate/consumers/toolmaterializer"
	_ "github.com/proliferate/proliferate/consumers/triggerprocessor"
)
