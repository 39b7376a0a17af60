package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// minBuildPrefix is the shortest build id prefix `module delete` takes: the
// listing shows 16 hex digits, and 8 still make a collision unlikely
// (a prefix matching two builds is refused anyway).
const minBuildPrefix = 8

// listModules prints the tenant's stored builds, newest first, with what a
// person needs to pick ones to delete: when each was uploaded, its size,
// whether it is the one new games of its name use, and the tenant's use of
// its bound.
func listModules(ctx context.Context, admin ludusv1connect.AdminServiceClient, out io.Writer) error {
	resp, err := admin.ListModules(ctx, connect.NewRequest(&ludusv1.ListModulesRequest{}))
	if err != nil {
		return err
	}
	var total int64
	for _, m := range resp.Msg.Modules {
		total += m.SizeBytes
	}
	fmt.Fprintf(out, "%d builds, %s", len(resp.Msg.Modules), backend.FormatBytes(total))
	if resp.Msg.MaxBuilds > 0 {
		fmt.Fprintf(out, " (the tenant may store %d builds, %s)", resp.Msg.MaxBuilds, backend.FormatBytes(resp.Msg.MaxBytes))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBUILD\tUPLOADED\tSIZE\tTICK RATE\tPLAYERS\t")
	newest := map[string]bool{}
	for _, m := range resp.Msg.Modules { // newest first
		mark := ""
		if !newest[m.Name] {
			newest[m.Name], mark = true, "newest: new games use it"
		}
		fmt.Fprintf(tw, "%s\t%.16s\t%s\t%s\t%d\t%d\t%s\n", m.Name, m.BuildId,
			m.CreatedAt.AsTime().Local().Format(time.DateTime), backend.FormatBytes(m.SizeBytes), m.TickRate, m.MaxPlayers, mark)
	}
	return tw.Flush()
}

// deleteModule is `ludus ctl module delete BUILD [--name NAME]`: BUILD is a
// build id or a prefix of one that `ludus ctl modules` shows.
func deleteModule(ctx context.Context, admin ludusv1connect.AdminServiceClient, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("module delete", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "", "delete the build from this name only (other names keep it)")
	build, err := oneArg(fs, args)
	if err != nil || build == "" {
		return errors.New("usage: ludus ctl module delete BUILD [--name NAME] (BUILD: a build id, or at least 8 of its first hex digits, as `ludus ctl modules` shows)")
	}
	id, err := resolveBuild(ctx, admin, build, *name)
	if err != nil {
		return err
	}
	resp, err := admin.DeleteModule(ctx, connect.NewRequest(&ludusv1.DeleteModuleRequest{BuildId: id, Name: *name}))
	if err != nil {
		return err
	}
	for _, m := range resp.Msg.Deleted {
		fmt.Fprintf(out, "deleted %s build %s (%s)\n", m.Name, m.BuildId, backend.FormatBytes(m.SizeBytes))
	}
	return nil
}

// pruneModules is `ludus ctl module prune NAME --keep N`.
func pruneModules(ctx context.Context, admin ludusv1connect.AdminServiceClient, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("module prune", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	keep := fs.Int("keep", 0, "how many of the newest builds to keep (at least 1)")
	name, err := oneArg(fs, args)
	if err != nil || name == "" || *keep < 1 {
		return errors.New("usage: ludus ctl module prune NAME --keep N (N at least 1: the newest N builds of NAME stay)")
	}
	resp, err := admin.PruneModules(ctx, connect.NewRequest(&ludusv1.PruneModulesRequest{Name: name, Keep: int32(*keep)}))
	if err != nil {
		return err
	}
	var freed int64
	for _, m := range resp.Msg.Deleted {
		freed += m.SizeBytes
		fmt.Fprintf(out, "deleted %s build %.16s\n", m.Name, m.BuildId)
	}
	for _, k := range resp.Msg.Kept {
		fmt.Fprintf(out, "kept %s build %.16s: %s\n", name, k.BuildId, k.Reason)
	}
	fmt.Fprintf(out, "%d builds deleted (%s), %d kept in use\n", len(resp.Msg.Deleted), backend.FormatBytes(freed), len(resp.Msg.Kept))
	return nil
}

// oneArg parses fs's flags around exactly one positional argument ("" if
// there is not exactly one).
func oneArg(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil || len(pos) != 1 {
		return "", err
	}
	return pos[0], nil
}

// resolveBuild returns the one stored build (under name, if set) whose id
// starts with prefix.
func resolveBuild(ctx context.Context, admin ludusv1connect.AdminServiceClient, prefix, name string) (string, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < minBuildPrefix || len(prefix) > 64 || strings.Trim(prefix, "0123456789abcdef") != "" {
		return "", fmt.Errorf("build %q: give a build id, or at least %d of its first hex digits", prefix, minBuildPrefix)
	}
	resp, err := admin.ListModules(ctx, connect.NewRequest(&ludusv1.ListModulesRequest{}))
	if err != nil {
		return "", err
	}
	found := map[string]bool{}
	for _, m := range resp.Msg.Modules {
		if strings.HasPrefix(m.BuildId, prefix) && (name == "" || m.Name == name) {
			found[m.BuildId] = true
		}
	}
	switch len(found) {
	case 0:
		if name != "" {
			return "", fmt.Errorf("no build %s under name %q (see ludus ctl modules)", prefix, name)
		}
		return "", fmt.Errorf("no build %s (see ludus ctl modules)", prefix)
	case 1:
		for id := range found {
			return id, nil
		}
	}
	return "", fmt.Errorf("%d builds start with %s: give more of the id", len(found), prefix)
}
