package matchmaking_test

import (
	"fmt"
	"strconv"
	"time"

	"ludus.dev/ludus/matchmaking"
)

func ExampleForm() {
	rules := matchmaking.DefaultRules("acme", "duel", map[string]float64{"eu": 80, "us": 80})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var tickets []matchmaking.Ticket
	// A duo and six solos between 1450 and 1540, all near Frankfurt.
	tickets = append(tickets, matchmaking.Ticket{
		ID: "duo", Tenant: "acme", Mode: "duel", EnqueuedAt: now.Add(-8 * time.Second),
		Party: []matchmaking.Member{
			{AccountID: "ana", Rating: 1450, RTT: map[string]float64{"eu": 22, "us": 130}},
			{AccountID: "ben", Rating: 1530, RTT: map[string]float64{"eu": 35, "us": 120}},
		},
	})
	for i := range 6 {
		tickets = append(tickets, matchmaking.Ticket{
			ID: "solo" + strconv.Itoa(i), Tenant: "acme", Mode: "duel", EnqueuedAt: now.Add(-time.Duration(i) * time.Second),
			Party: []matchmaking.Member{{
				AccountID: "p" + strconv.Itoa(i), Rating: 1460 + float64(i)*15,
				RTT: map[string]float64{"eu": 30 + float64(i), "us": 110},
			}},
		})
	}
	res, err := matchmaking.Form(now, tickets, rules)
	if err != nil {
		panic(err)
	}
	for _, m := range res.Matches {
		fmt.Printf("match in %s, worst RTT %v ms, spread %v, imbalance %v\n", m.Region, m.MaxRTT, m.Spread, m.Imbalance)
		for i, team := range m.Teams {
			fmt.Printf("team %d (sum %v):", i, team.RatingSum)
			for _, s := range team.Seats {
				fmt.Printf(" %s", s.AccountID)
			}
			fmt.Println()
		}
	}
	fmt.Println("searching:", len(res.Searching))
	// Output:
	// match in eu, worst RTT 35 ms, spread 75, imbalance 15
	// team 0 (sum 5990): ana ben p5 p1
	// team 1 (sum 5975): p4 p3 p2 p0
	// searching: 0
}
