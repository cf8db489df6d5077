package report

import (
	"fmt"
	"strings"

	"github.com/hetsync/hetsync/metrics"
)

// LinkTraffic is what a run's ranks sent by class of link (summary.json's sent_by_link): to
// ranks of their own host, to other hosts of their group of hosts, to other groups (racks).
type LinkTraffic struct {
	Bytes metrics.LinkBytes `json:"bytes"`
	// PerSample divides Bytes by the samples all ranks trained; PerRound by the rounds all
	// ranks recorded (Σ per_rank rounds: the bytes a rank sends in a round of its own, on
	// average, which for an asynchronous strategy is one push and pull).
	PerSample LinkRates `json:"per_sample"`
	PerRound  LinkRates `json:"per_round"`
}

// LinkRates are bytes per unit by class of link.
type LinkRates struct {
	Host   float64 `json:"host"`
	Hosts  float64 `json:"hosts"`
	Groups float64 `json:"groups"`
}

func ratesOf(b metrics.LinkBytes, per float64) LinkRates {
	if per <= 0 {
		return LinkRates{}
	}
	return LinkRates{Host: float64(b.Host) / per, Hosts: float64(b.Hosts) / per, Groups: float64(b.Groups) / per}
}

// linkTraffic is s's bytes by class of link, nil for a run that did not count them.
func linkTraffic(s metrics.Summary) *LinkTraffic {
	if s.SentByLink == nil {
		return nil
	}
	rounds := 0
	for _, p := range s.PerRank {
		rounds += p.Rounds
	}
	b := *s.SentByLink
	return &LinkTraffic{Bytes: b, PerSample: ratesOf(b, float64(s.Samples)), PerRound: ratesOf(b, float64(rounds))}
}

// medianRates is the median, class by class, of the runs' bytes per sample; nil unless every
// run counted them.
func medianRates(rows []Row, idx []int) *LinkRates {
	var host, hosts, groups []float64
	for _, i := range idx {
		l := rows[i].Links
		if l == nil {
			return nil
		}
		host = append(host, l.PerSample.Host)
		hosts = append(hosts, l.PerSample.Hosts)
		groups = append(groups, l.PerSample.Groups)
	}
	return &LinkRates{Host: median(host), Hosts: median(hosts), Groups: median(groups)}
}

// linksMarkdown renders the "Bytes on each link class" section: every run that counted them,
// then the medians per sample of the groups of seeds; "" when no run counted them.
func linksMarkdown(rows []Row, groups []Group) string {
	var b strings.Builder
	for _, r := range rows {
		l := r.Links
		if l == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n## Bytes on each link class\n\nWhat the ranks sent, over all ranks, to ranks of their own host (shared memory, Unix sockets, loopback), to other hosts of their group of hosts, and to other groups of hosts (racks) of the job's link matrix; per sample divides by the samples all ranks trained, per round by the rounds all ranks recorded.\n\n")
			b.WriteString("| run | strategy | host (B) | hosts (B) | groups (B) | host B/sample | hosts B/sample | groups B/sample | host B/round | hosts B/round | groups B/round |\n")
			b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f |\n", mdEscape(r.Name), mdEscape(r.Strategy),
			l.Bytes.Host, l.Bytes.Hosts, l.Bytes.Groups, l.PerSample.Host, l.PerSample.Hosts, l.PerSample.Groups,
			l.PerRound.Host, l.PerRound.Hosts, l.PerRound.Groups)
	}
	header := false
	for _, g := range groups {
		if g.Links == nil {
			continue
		}
		if !header {
			b.WriteString("\nAcross seeds, the median bytes per sample:\n\n| runs | strategy | shard | heterogeneity | host B/sample | hosts B/sample | groups B/sample |\n|---|---|---|---|---:|---:|---:|\n")
			header = true
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %.1f | %.1f |\n", mdEscape(strings.Join(g.Runs, ", ")), mdEscape(g.Strategy),
			mdEscape(g.Shard), mdEscape(g.Hetero), g.Links.Host, g.Links.Hosts, g.Links.Groups)
	}
	return b.String()
}
