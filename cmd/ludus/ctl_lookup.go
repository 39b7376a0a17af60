package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// resolveTenant turns what a person typed (a tenant's slug, or its id) into
// the tenant id operator RPCs take.
func resolveTenant(ctx context.Context, admin ludusv1connect.AdminServiceClient, typed string) (string, error) {
	resp, err := admin.ListTenants(ctx, connect.NewRequest(&ludusv1.ListTenantsRequest{}))
	if err != nil {
		return "", fmt.Errorf("looking up tenant %q: %w", typed, err)
	}
	for _, t := range resp.Msg.Tenants {
		if t.Slug == typed || t.Id == typed {
			return t.Id, nil
		}
	}
	return "", fmt.Errorf("no tenant has the slug or id %q (\"ludus ctl tenants\" lists them)", typed)
}

// listEndedGames prints the tenant's archived games, newest first, each with
// how it ended and, when the backend has its result, the players' scores.
func listEndedGames(ctx context.Context, admin ludusv1connect.AdminServiceClient, out io.Writer) error {
	games, err := admin.ListArchivedGames(ctx, connect.NewRequest(&ludusv1.ListArchivedGamesRequest{Limit: 100}))
	if err != nil {
		return err
	}
	results, err := admin.ListMatchResults(ctx, connect.NewRequest(&ludusv1.ListMatchResultsRequest{Limit: 200}))
	if err != nil {
		return err
	}
	byMatch := make(map[string]*ludusv1.MatchResult, len(results.Msg.Results))
	for _, r := range results.Msg.Results {
		byMatch[r.MatchId] = r
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "GAME\tENDED\tSTATE\tTICK\tRESULT")
	for _, g := range games.Msg.Games {
		result := g.Message
		if r, ok := byMatch[g.GameId]; ok {
			result = resultSummary(r)
		}
		ended := ""
		if g.ArchivedAt != nil {
			ended = g.ArchivedAt.AsTime().Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", g.GameId, ended, g.State, g.FinalTick, result)
	}
	if len(games.Msg.Games) == 0 {
		fmt.Fprintln(tw, "(no ended games yet: a game is listed here once its node archived it)")
	}
	return nil
}

// resultSummary is one line of account ids and scores: "acc-1 12, acc-2 7".
func resultSummary(r *ludusv1.MatchResult) string {
	parts := make([]string, 0, len(r.Players))
	for _, p := range r.Players {
		parts = append(parts, fmt.Sprintf("%s %d", p.AccountId, p.Score))
	}
	if len(parts) == 0 {
		return "(no players)"
	}
	return strings.Join(parts, ", ")
}
