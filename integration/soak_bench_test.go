package integration_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/offsetkeeper/offsetkeeper/coordinator"
	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// BenchmarkSoak runs a group of REPLICAS replicas (3) as processes for
// DURATION (1h) over PARTITIONS partitions (256) of OKBENCH_KAFKA's Kafka
// (apache-3 for the record) at RATE records a second (1,000), with a
// fault every FAULT_EVERY (1m), in turn: a replica SIGKILLed and started
// again, one paused past its lease (SIGSTOP, SIGCONT), one stopped with
// SIGTERM and started again, and on Apache Kafka a broker paused for 15 s.
// Every SAMPLE (10s) it writes a line of OKBENCH_SOAK_CSV (soak.csv in
// the working directory): for each replica its resident memory,
// goroutines and open files, then etcd's database size and in use, and
// the group's lag in records (etcd's committed offsets against what was
// acknowledged). It reports each series' mean over the last tenth of the
// run against the first tenth after the start: flat is 1.
//
//	OKBENCH_KAFKA=apache-3 go test -run '^$' -bench 'Soak$' -benchtime 1x -timeout 90m ./integration/
//	go test -short -run '^$' -bench 'Soak$' -benchtime 1x ./integration/   # 2 minutes, kfake
func BenchmarkSoak(b *testing.B) {
	parts := scaleInt(b, "PARTITIONS", 256, 32)
	replicas := scaleInt(b, "REPLICAS", 3, 3)
	rate := scaleInt(b, "RATE", 1000, 500)
	duration := scaleDuration(b, "DURATION", time.Hour, 2*time.Minute)
	faultEvery := scaleDuration(b, "FAULT_EVERY", time.Minute, 20*time.Second)
	sampleEvery := scaleDuration(b, "SAMPLE", 10*time.Second, 2*time.Second)
	out := os.Getenv("OKBENCH_SOAK_CSV")
	if out == "" {
		out = "soak.csv"
	}
	for b.Loop() {
		soak(b, parts, replicas, rate, duration, faultEvery, sampleEvery, out)
	}
}

// soakReplica is one replica process of the soak, started again after a
// fault that ends it.
type soakReplica struct {
	id   string
	proc *harness.Process
}

func soak(b *testing.B, parts, replicas, rate int, duration, faultEvery, sampleEvery time.Duration, out string) {
	etcd := harness.StartEtcd(b, 1)
	cli := etcd.Client(b)
	k := startBenchKafka(b, parts, "soak")
	prod := trickleProducer(b, k.Kafka)
	exe := imageBin(b) // the build that ships
	start := func(id string) *harness.Process {
		return harness.StartProcess(b, id, exe, "run", "--http-addr", "127.0.0.1:0",
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--brokers", strings.Join(k.Brokers(), ","),
			"--group", "soak", "--topics", "soak", "--sink", "discard:", "--replica-id", id,
			"--lease-ttl", "5s", "--etcd-compact-interval", "1m", "--log-level", "warn")
	}
	rs := make([]*soakReplica, replicas)
	for i := range rs {
		rs[i] = &soakReplica{id: fmt.Sprintf("r%d", i)}
		rs[i].proc = start(rs[i].id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	acked := make(chan int64, 1)
	var produced atomic.Int64
	go func() {
		n, err := trickleCounted(ctx, prod, "soak", parts, rate, 100, &produced)
		if err != nil {
			b.Errorf("producer: %v", err)
		}
		acked <- n
	}()

	f, err := os.Create(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	header := []string{"seconds"}
	for _, r := range rs {
		header = append(header, r.id+"_rss_mib", r.id+"_goroutines", r.id+"_open_files")
	}
	header = append(header, "etcd_db_mib", "etcd_in_use_mib", "lag_records", "fault")
	_ = w.Write(header)

	began := time.Now()
	faults := time.NewTicker(faultEvery)
	defer faults.Stop()
	sample := time.NewTicker(sampleEvery)
	defer sample.Stop()
	nfault := 0
	fault := ""
	var faultAt []float64
	var rows [][]float64
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-faults.C:
			faultAt = append(faultAt, time.Since(began).Seconds())
			fault = soakFault(b, nfault, rs, k, start)
			nfault++
			b.Logf("%s: %s", time.Since(began).Round(time.Second), fault)
		case now := <-sample.C:
			row := []float64{now.Sub(began).Seconds()}
			addrs := soakAddrs(ctx, cli)
			for _, r := range rs {
				row = append(row, soakProcess(r.proc, addrs[r.id])...)
			}
			st, _ := coordinator.Status(ctx, cli)
			committed := soakCommitted(ctx, cli)
			row = append(row, float64(st.DBSize)/(1<<20), float64(st.DBSizeInUse)/(1<<20), float64(produced.Load()-committed))
			rows = append(rows, row)
			rec := make([]string, 0, len(row)+1)
			for _, v := range row {
				rec = append(rec, strconv.FormatFloat(v, 'f', 2, 64))
			}
			_ = w.Write(append(rec, fault))
			w.Flush()
			fault = ""
		}
	}
	total := <-acked
	// Everything produced is committed within a minute of the end.
	pollUntil(b, 2*time.Minute, time.Second, "everything committed", func() bool { return soakCommitted(context.Background(), cli) >= total })
	for _, r := range rs {
		r.proc.Signal(syscall.SIGTERM)
		r.proc.Wait(time.Minute)
	}
	soakReport(b, header, rows)
	if len(rows) > 1 {
		svg := strings.TrimSuffix(out, ".csv") + ".svg"
		if err := os.WriteFile(svg, []byte(soakPlot(header, rows, faultAt)), 0o644); err != nil {
			b.Error(err)
		}
	}
	b.ReportMetric(float64(total), "records")
	b.ReportMetric(float64(nfault), "faults")
}

// soakFault deals fault n, in turn.
func soakFault(b *testing.B, n int, rs []*soakReplica, k *benchKafka, start func(string) *harness.Process) string {
	r := rs[n%len(rs)]
	kinds := 3
	if k.real() {
		kinds = 4
	}
	switch n % kinds {
	case 0:
		r.proc.Kill()
		r.proc.Wait(10 * time.Second)
		r.proc = start(r.id)
		return "SIGKILL " + r.id
	case 1:
		r.proc.Signal(syscall.SIGSTOP)
		time.Sleep(12 * time.Second) // past its 5 s lease
		r.proc.Signal(syscall.SIGCONT)
		return "SIGSTOP 12s " + r.id
	case 2:
		r.proc.Signal(syscall.SIGTERM)
		r.proc.Wait(time.Minute)
		r.proc = start(r.id)
		return "SIGTERM " + r.id
	default:
		node := k.Node(n % k.Nodes())
		node.Pause()
		time.Sleep(15 * time.Second)
		node.Resume()
		return fmt.Sprintf("broker %d paused 15s", node.ID())
	}
}

// soakProcess is a replica's resident memory (MiB), goroutines and open
// files; -1 where it cannot be read (the process restarting).
func soakProcess(p *harness.Process, addr string) []float64 {
	rss, _, err := harness.ProcMemory(p.PID())
	mib := float64(rss) / (1 << 20)
	if err != nil {
		mib = -1
	}
	files := -1.0
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.PID())); err == nil {
		files = float64(len(fds))
	}
	return []float64{mib, soakGoroutines(addr), files}
}

// soakAddrs are the replicas' HTTP addresses, as their member keys say.
func soakAddrs(ctx context.Context, cli *clientv3.Client) map[string]string {
	out := map[string]string{}
	coord, err := coordinator.New(cli, "soak")
	if err != nil {
		return out
	}
	ms, err := coord.Members(ctx)
	if err != nil {
		return out
	}
	for _, m := range ms {
		out[m.ID] = m.HTTPAddr
	}
	return out
}

// soakGoroutines reads go_goroutines from a replica's /metrics at addr;
// -1 when it cannot.
func soakGoroutines(addr string) float64 {
	if addr == "" {
		return -1
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil || fams["go_goroutines"] == nil {
		return -1
	}
	return fams["go_goroutines"].Metric[0].GetGauge().GetValue()
}

// soakCommitted sums the group's committed offsets in etcd.
func soakCommitted(ctx context.Context, cli *clientv3.Client) int64 {
	coord, err := coordinator.New(cli, "soak")
	if err != nil {
		return 0
	}
	snap, err := coord.Snapshot(ctx)
	if err != nil {
		return 0
	}
	var n int64
	for _, o := range snap.Offsets {
		n += o.Next
	}
	return n
}

// soakReport reports, for each series, the mean of the last tenth of the
// run over that of the second tenth (the first holds the start).
func soakReport(b *testing.B, header []string, rows [][]float64) {
	if len(rows) < 20 {
		return
	}
	tenth := len(rows) / 10
	mean := func(col, from, to int) float64 {
		var s float64
		var n int
		for _, r := range rows[from:to] {
			if r[col] >= 0 {
				s += r[col]
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return s / float64(n)
	}
	for col := 1; col < len(header)-1; col++ {
		early, late := mean(col, tenth, 2*tenth), mean(col, len(rows)-tenth, len(rows))
		b.Logf("%-22s second tenth %10.2f  last tenth %10.2f", header[col], early, late)
		if strings.HasSuffix(header[col], "_rss_mib") || strings.HasSuffix(header[col], "_goroutines") ||
			strings.HasPrefix(header[col], "etcd_in_use") {
			if early > 0 {
				b.ReportMetric(late/early, header[col]+"-last/second-tenth")
			}
		}
	}
}

// soakPlot draws the soak's series over time as an SVG of small
// multiples, one panel per kind (memory, goroutines, open files, etcd,
// lag), one line per replica, with the faults as ticks along the time
// axis.
func soakPlot(header []string, rows [][]float64, faults []float64) string {
	type panel struct {
		title  string
		suffix string
	}
	panels := []panel{{"resident memory, MiB", "_rss_mib"}, {"goroutines", "_goroutines"}, {"open files", "_open_files"},
		{"etcd database, MiB (file, in use)", "etcd_"}, {"lag, records", "lag_records"}}
	const w, h, pad = 720, 150, 40
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}
	end := rows[len(rows)-1][0]
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, len(panels)*(h+pad)+pad)
	for i, p := range panels {
		top := pad + i*(h+pad)
		var cols []int
		for c, name := range header {
			if c > 0 && (strings.HasSuffix(name, p.suffix) || strings.HasPrefix(name, p.suffix)) {
				cols = append(cols, c)
			}
		}
		hi := 0.0
		for _, r := range rows {
			for _, c := range cols {
				hi = max(hi, r[c])
			}
		}
		hi = max(hi*1.1, 1)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s (0 to %.0f)</text>`+"\n", pad, top-6, p.title, hi)
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", pad, top, w-2*pad, h)
		for _, t := range faults {
			x := pad + int(t/end*float64(w-2*pad))
			fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`+"\n", x, top, x, top+h)
		}
		for k, c := range cols {
			var pts []string
			for _, r := range rows {
				if r[c] < 0 {
					continue
				}
				x := float64(pad) + r[0]/end*float64(w-2*pad)
				y := float64(top+h) - r[c]/hi*float64(h)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n", colors[k%len(colors)], strings.Join(pts, " "))
			fmt.Fprintf(&sb, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", w-pad+4, top+12+12*k, colors[k%len(colors)], strings.TrimSuffix(header[c], p.suffix))
		}
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d">minutes: 0 to %.0f; grey lines: faults</text>`+"\n", pad, len(panels)*(h+pad)+pad-10, end/60)
	sb.WriteString("</svg>\n")
	return sb.String()
}
