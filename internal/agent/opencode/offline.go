package opencode

// OfflineEnv returns the environment entries (KEY=VALUE) that keep
// OpenCode from reaching the network on its own (auto-update, models.dev,
// share, LSP downloads, default plugins…), for providers that start
// `opencode serve` themselves (a cloud sandbox) instead of Launch.
func OfflineEnv() []string { return append([]string(nil), offlineEnv...) }
