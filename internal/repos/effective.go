package repos

import (
	"fmt"
	"path"
)

// ResolveServiceCommands computes what a sandbox of cfg runs (cfg.Repos in
// position order; repoCmds holds each repo's default commands by repo id):
//
//  1. The configuration's own commands, when it has any, win entirely
//     (source "configuration"). A command without workspace_path runs in the
//     only repo's workspace of a single-repo configuration, else at the
//     workspace root "."; one naming a workspace the configuration no longer
//     has is skipped and reported.
//  2. Otherwise every repo's default commands, in repo order, each in its
//     repo's workspace (source "repo"). Names that several repos share are
//     qualified with the workspace ("dev (api)") so that the sandbox's service
//     manager, which keys services by name, does not stop one to start another.
//  3. Otherwise nothing (source "none").
//
// Each command's resolved_cwd is its workspace joined with its cwd; both are
// validated relative paths without "..", so it never leaves the workspace.
func ResolveServiceCommands(cfg Configuration, repoCmds map[string][]RepoServiceCommand) EffectiveServiceCommands {
	out := EffectiveServiceCommands{Commands: []EffectiveCommand{}, Workspaces: []string{}, Skipped: []SkippedCommand{}}
	byPath := map[string]string{}
	for _, r := range cfg.Repos {
		out.Workspaces = append(out.Workspaces, r.WorkspacePath)
		byPath[r.WorkspacePath] = r.RepoID
	}
	repoAt := func(wp string) *string {
		if id, ok := byPath[wp]; ok {
			return &id
		}
		return nil
	}
	if len(cfg.ServiceCommands) > 0 {
		out.Source = SourceConfiguration
		for _, c := range cfg.ServiceCommands {
			wp := c.WorkspacePath
			if wp == "" {
				wp = "."
				if len(cfg.Repos) == 1 {
					wp = cfg.Repos[0].WorkspacePath
				}
			}
			if _, ok := byPath[wp]; !ok && wp != "." {
				out.Skipped = append(out.Skipped, SkippedCommand{Name: c.Name, WorkspacePath: wp,
					Reason: fmt.Sprintf("workspace %q is not a workspace of this configuration", wp)})
				continue
			}
			out.Commands = append(out.Commands, EffectiveCommand{Name: c.Name, Command: c.Command, WorkspacePath: wp,
				Cwd: c.Cwd, ResolvedCwd: path.Join(wp, c.Cwd), RepoID: repoAt(wp)})
		}
		return out
	}
	count := map[string]int{}
	for _, r := range cfg.Repos {
		for _, c := range repoCmds[r.RepoID] {
			count[c.Name]++
		}
	}
	used := map[string]bool{}
	for _, r := range cfg.Repos {
		for _, c := range repoCmds[r.RepoID] {
			name := c.Name
			if count[name] > 1 {
				name = fmt.Sprintf("%s (%s)", c.Name, r.WorkspacePath)
			}
			for n := 2; used[name]; n++ {
				name = fmt.Sprintf("%s (%s) #%d", c.Name, r.WorkspacePath, n)
			}
			used[name] = true
			out.Commands = append(out.Commands, EffectiveCommand{Name: name, Command: c.Command, WorkspacePath: r.WorkspacePath,
				Cwd: c.Cwd, ResolvedCwd: path.Join(r.WorkspacePath, c.Cwd), RepoID: repoAt(r.WorkspacePath)})
		}
	}
	out.Source = SourceRepo
	if len(out.Commands) == 0 {
		out.Source = SourceNone
	}
	return out
}

// checkWorkspaceRefs verifies that commands and env files name a workspace
// the configuration has ("." is always the root).
func checkWorkspaceRefs(paths []string, cmds []ServiceCommand, cmdField string, files []EnvFile, fileField string) []FieldError {
	has := map[string]bool{".": true}
	for _, p := range paths {
		has[p] = true
	}
	var fes []FieldError
	for i, c := range cmds {
		if c.WorkspacePath != "" && !has[c.WorkspacePath] {
			fes = append(fes, FieldError{fmt.Sprintf("%s[%d].workspace_path", cmdField, i),
				fmt.Sprintf("%q is not a workspace of this configuration", c.WorkspacePath)})
		}
	}
	for i, f := range files {
		if !has[f.WorkspacePath] {
			fes = append(fes, FieldError{fmt.Sprintf("%s[%d].workspace_path", fileField, i),
				fmt.Sprintf("%q is not a workspace of this configuration", f.WorkspacePath)})
		}
	}
	return fes
}
