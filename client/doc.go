// Package client is a native Go client of a Ludus gateway: it signs a player in,
// creates games or finds matches and joins them, and plays one over the
// bidirectional GameService.Play stream, in either delivery mode
// (docs/STREAMS.md, docs/ABI.md "Snapshots and ludus_render"):
//
//   - Pixels: the sim node renders each view and the gateway streams it.
//   - Snapshots: the node streams the module's small per-player snapshots and
//     this package draws them locally with the game module's own ludus_render,
//     run in wazero (ludus.dev/ludus/simnode/engine). The module's bytes are
//     fetched by build id from GET /modules/{build_id}.wasm, checked against
//     the build id (their SHA-256) before anything runs, compiled once per
//     Client and kept in memory.
//
// A Session hands out decoded indexed8 frames (Frames), takes inputs (Send)
// and reports their acknowledgements (Acks) and what happens to the stream
// (Notices): re-attaches when the game moves between nodes, reconnects, and a
// fall back from snapshots to pixels when the module cannot be fetched,
// verified or compiled, has no renderer, or its renderer keeps failing.
// Rendering never holds up the stream: when the consumer or the renderer is
// behind, older frames are dropped and the newest one wins.
//
// Typical use:
//
//	c := client.Dial("http://127.0.0.1:8080")
//	defer c.Close()
//	if _, err := c.GuestLogin(ctx, "demo", client.NewDeviceID(), "ada"); err != nil { ... }
//	g, err := c.CreateGame(ctx, "arena", 3)
//	s, err := c.Play(ctx, g.GameId, client.Auto)
//	defer s.Close()
//	for f := range s.Frames() {
//		w, h, palette, pixels, err := f.Indexed8()
//		...
//		s.Send([]byte{mask})
//	}
//
// # Matchmaking from Go
//
// FindMatch queues the player in a game mode of the tenant's matchmaking
// rules (docs/API.md, "Matchmaking"; `ludus dev` seeds the mode "arena", two
// teams of two, bots filling the empty seats after 45 s) and returns a Search
// once the gateway has taken it. Its Updates channel carries Searching about
// once a second (the rating band, the time waited), then exactly one of Found,
// TimedOut and Cancelled; Cancel leaves the queue. The round trips sent with
// the search come from MeasureRTT, which pings the gateway and reports the
// median under the region named by WithRegion, else the region the
// gateway's Ping names, else "local". A party searches together: one
// member calls CreateParty and shares its code, and every member, the creator
// too, calls FindMatch with that code and the party's size. Play the game
// Found names:
//
//	s, err := c.FindMatch(ctx, client.FindMatchOptions{Mode: "arena"}) // RTT measured
//	for u := range s.Updates() {
//		if f, ok := u.(client.Found); ok {
//			session, err := c.Play(ctx, f.GameID, client.Auto)
//			...
//		}
//	}
//
// Plain http:// gateway URLs are spoken to over h2c (HTTP/2 with prior
// knowledge), https:// ones over TLS with ALPN; Play needs HTTP/2 either way.
package client
