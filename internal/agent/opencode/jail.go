package opencode

// Jail describes how a jailed agent (LaunchOptions.Jail) is started and
// reached: the local sandbox provider's bubblewrap sandbox, with its own
// view of the filesystem and its own network namespace. Paths in
// LaunchOptions stay host paths (Launch creates and seeds them on the
// host); Path maps them to what the agent sees. Readiness still waits for
// the "listening on" line, then polls health through URL.
type Jail struct {
	// Wrap returns the command line that runs argv inside the jail. The
	// environment Launch builds is the process's; the jail passes it on.
	Wrap func(argv []string) []string
	// Path maps a host path (the workspace, the isolated home and its XDG
	// dirs, the database) to the path inside the jail.
	Path func(host string) string
	// Port is the agent's fixed port on the jail's own loopback (its
	// network namespace is private, so nothing else can hold it).
	Port int
	// URL is where this process reaches that port (a forwarder); it
	// becomes Process.URL.
	URL string
}
