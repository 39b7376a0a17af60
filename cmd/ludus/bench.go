package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
)

// A bench measures one part of Ludus and returns its figures as one flat JSON
// object. Field names are an interface other tools read: keep them stable.
type bench struct {
	summary string
	// run measures; fs holds the bench's own flags, parsed before run.
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, progress io.Writer) (map[string]any, error)
}

var benches = map[string]bench{}

// registerBench adds a bench; each bench lives in its own bench_NAME.go file.
func registerBench(name string, b bench) { benches[name] = b }

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: ludus bench NAME [-json] [flags]\n\nbenches:")
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, benches[n].summary)
	}
}

func runBench(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" {
		benchUsage(out)
		return nil
	}
	b, ok := benches[args[0]]
	if !ok {
		benchUsage(os.Stderr)
		return fmt.Errorf("unknown bench %q", args[0])
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	if b.flags != nil {
		b.flags(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	progress := io.Writer(os.Stderr)
	res, err := b.run(ctx, progress)
	if err != nil {
		return err
	}
	if res == nil {
		return errors.New("bench produced no result")
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		return enc.Encode(res)
	}
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%v\n", k, res[k])
	}
	return tw.Flush()
}
