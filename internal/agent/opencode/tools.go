package opencode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/proliferate/proliferate/scripts"
)

// Tools are the installed agent's paths.
type Tools struct {
	Binary    string
	PluginDir string
}

// DefaultToolsDir is the shared cache scripts/opencode.sh installs into
// when PROLIFERATE_TOOLS_DIR is unset.
const DefaultToolsDir = "/var/tmp/proliferate/tools"

// ResolveTools finds the agent's binary and plugin dir the same way from
// any working directory:
//
//  1. $OPENCODE_BIN and $OPENCODE_PLUGIN_DIR, each when set;
//  2. script, or $PROLIFERATE_OPENCODE_SCRIPT, when given: its `path` and
//     `plugin-dir` (installing when missing);
//  3. the shared cache scripts/opencode.sh installs into
//     ($PROLIFERATE_TOOLS_DIR, default DefaultToolsDir, made absolute),
//     when the pinned version's install there is complete;
//  4. opencode on $PATH for the binary, when the plugin dir is known;
//  5. otherwise the pinned version is installed into that cache (as `make
//     tools` does; needs npm) by the copy of scripts/opencode.sh built into
//     this binary.
//
// The paths returned are absolute.
func ResolveTools(ctx context.Context, script string) (Tools, error) {
	t := Tools{Binary: os.Getenv("OPENCODE_BIN"), PluginDir: os.Getenv("OPENCODE_PLUGIN_DIR")}
	if t.Binary != "" {
		bin, err := absBinary(t.Binary)
		if err != nil {
			return Tools{}, fmt.Errorf("opencode: OPENCODE_BIN=%s: %w", t.Binary, err)
		}
		t.Binary = bin
	}
	if t.PluginDir != "" {
		dir, err := filepath.Abs(t.PluginDir)
		if err != nil {
			return Tools{}, fmt.Errorf("opencode: OPENCODE_PLUGIN_DIR: %w", err)
		}
		t.PluginDir = dir
	}
	if t.complete() {
		return t, nil
	}
	if script == "" {
		script = os.Getenv("PROLIFERATE_OPENCODE_SCRIPT")
	}
	if script != "" {
		return t.fill(ctx, []string{script}, script, nil)
	}
	cache, err := toolsCache()
	if err != nil {
		return Tools{}, err
	}
	// The script's name ($0) only shows in its messages.
	embedded := []string{"bash", "-c", scripts.OpenCode, "opencode.sh"}
	env := []string{"PROLIFERATE_TOOLS_DIR=" + cache.dir}
	if cache.installed() {
		return t.fill(ctx, embedded, "scripts/opencode.sh (built in)", env)
	}
	if t.Binary == "" && t.PluginDir != "" {
		if bin, err := exec.LookPath("opencode"); err == nil {
			if t.Binary, err = filepath.Abs(bin); err == nil {
				return t, nil
			}
		}
	}
	return t.fill(ctx, embedded, "scripts/opencode.sh (built in)", env)
}

func (t Tools) complete() bool { return t.Binary != "" && t.PluginDir != "" }

// fill asks the script (argv: the command line without its argument) for
// what t lacks.
func (t Tools) fill(ctx context.Context, argv []string, name string, env []string) (Tools, error) {
	ask := func(arg string) (string, error) {
		args := append(append([]string{}, argv[1:]...), arg)
		cmd := exec.CommandContext(ctx, argv[0], args...)
		cmd.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("opencode: %s %s: %w: %s", name, arg, err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	var err error
	if t.Binary == "" {
		if t.Binary, err = ask("path"); err != nil {
			return Tools{}, err
		}
	}
	if t.PluginDir == "" {
		if t.PluginDir, err = ask("plugin-dir"); err != nil {
			return Tools{}, err
		}
	}
	return t, nil
}

// absBinary makes an explicit binary absolute: a bare name is looked up on
// $PATH, a relative path is taken from the working directory (the agent
// runs in its workspace, where a relative path would mean something else).
func absBinary(bin string) (string, error) {
	if !strings.ContainsRune(bin, os.PathSeparator) {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", err
		}
		bin = p
	}
	return filepath.Abs(bin)
}

// cacheDir is the pinned version's directory in the shared tools cache,
// laid out as scripts/opencode.sh lays it out.
type cacheDir struct {
	dir, version, pluginVersion string
}

var scriptVersion = regexp.MustCompile(`(?m)^(OPENCODE_VERSION|OPENCODE_PLUGIN_VERSION)="\$\{[A-Z_]+:-([^}"]+)\}"`)

// toolsCache reads the cache root and the pinned versions the way the
// script does: the environment first, then the script's own defaults.
func toolsCache() (cacheDir, error) {
	c := cacheDir{dir: os.Getenv("PROLIFERATE_TOOLS_DIR"), version: os.Getenv("OPENCODE_VERSION"),
		pluginVersion: os.Getenv("OPENCODE_PLUGIN_VERSION")}
	for _, m := range scriptVersion.FindAllStringSubmatch(scripts.OpenCode, -1) {
		switch {
		case m[1] == "OPENCODE_VERSION" && c.version == "":
			c.version = m[2]
		case m[1] == "OPENCODE_PLUGIN_VERSION" && c.pluginVersion == "":
			c.pluginVersion = m[2]
		}
	}
	if c.version == "" || c.pluginVersion == "" {
		return cacheDir{}, errors.New("opencode: the built-in scripts/opencode.sh pins no version")
	}
	if c.dir == "" {
		c.dir = DefaultToolsDir
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return cacheDir{}, fmt.Errorf("opencode: PROLIFERATE_TOOLS_DIR: %w", err)
	}
	c.dir = dir
	return c, nil
}

// installed reports whether the script finished installing the pinned
// version (it writes the stamp last).
func (c cacheDir) installed() bool {
	stamp := filepath.Join(c.dir, "opencode-"+c.version, ".installed-"+c.version+"-plugin-"+c.pluginVersion)
	_, err := os.Stat(stamp)
	return err == nil
}
