package harness

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// JavaRunOptions configure RunJavaTimed.
type JavaRunOptions struct {
	// Flags are the JVM's flags. Empty: the tools' (kafkaToolJVMFlags,
	// as RunJava's). Kafka's bin scripts run their tools with
	// KafkaScriptJVMFlags.
	Flags []string
	// Mark, when set, names the point where the program's own work
	// starts: the first line of its stdout that begins with Mark. The
	// run's MarkCPU and MarkWall are taken when it is read, so that
	// CPU-MarkCPU is the work after the JVM's start.
	Mark string
	// OnMark, when set, is called as the Mark line is read, on the
	// goroutine that reads stdout: e.g. to take other processes' CPU
	// time at that point. It must not fail the test (FailNow).
	OnMark func()
	// Timeout bounds the run (default javaRunTimeout, 3 minutes).
	Timeout time.Duration
}

// KafkaScriptJVMFlags are the JVM flags that Kafka's bin scripts give a
// tool such as kafka-consumer-perf-test.sh: its heap (-Xmx512M) and
// kafka-run-class.sh's default KAFKA_JVM_PERFORMANCE_OPTS (G1, both JIT
// compilers).
var KafkaScriptJVMFlags = []string{
	"-Xmx512M",
	"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
}

// JavaRun is a finished run of RunJavaTimed.
type JavaRun struct {
	Stdout string
	// Wall is from the process's start to its exit; CPU is the user plus
	// system CPU time of the JVM, all its threads, over the same span
	// (getrusage of the exited process, in 10 ms ticks).
	Wall, CPU time.Duration
	// Marked tells whether a line began with Mark; MarkWall and MarkCPU
	// are the wall time from the start and the JVM's CPU time
	// (/proc/<pid>/stat) when it was read: the JVM's start, class
	// loading and the program's setup up to that line.
	Marked            bool
	MarkWall, MarkCPU time.Duration
}

// RunJavaTimed runs Java class mainClass with args as RunJava does (on
// Apache Kafka's jars and the harness's programs, compiled on first use),
// as a process of its own, and returns what it printed on stdout with its
// wall and CPU time: to measure a Java client beside others. Unlike
// RunJava it runs the JVM with o.Flags and without the brokers' class data
// sharing archive, so that the JVM starts as Kafka's scripts start it. It
// fails t if the program exits with an error or outlives o.Timeout,
// showing its stderr and log. On kfake's cluster it needs the jars as
// StartApacheKafka does (and skips t without them, outside CI).
func (k *Kafka) RunJavaTimed(t testing.TB, o JavaRunOptions, mainClass string, args ...string) JavaRun {
	t.Helper()
	env := k.javaEnv(t)
	classes, err := compileJava(env)
	if err != nil {
		t.Fatalf("kafka: %v", err)
	}
	flags := o.Flags
	if len(flags) == 0 {
		flags = kafkaToolJVMFlags
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = javaRunTimeout
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := javaCommand(ctx, env.java, env.libs, env.log4j, "", logDir, classes, flags, append([]string{mainClass}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("kafka: java %s: %v", mainClass, err)
	}
	var errOut syncBuffer
	cmd.Stderr = &errOut
	what := fmt.Sprintf("java %s %s", mainClass, strings.Join(args, " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("kafka: %s: %v", what, err)
	}
	var (
		run  JavaRun
		out  strings.Builder
		read sync.WaitGroup
	)
	read.Go(func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if o.Mark != "" && !run.Marked && strings.HasPrefix(line, o.Mark) {
				run.Marked, run.MarkWall = true, time.Since(start)
				run.MarkCPU, _ = ProcCPU(cmd.Process.Pid) // 0 if it exited meanwhile
				if o.OnMark != nil {
					o.OnMark()
				}
			}
			out.WriteString(line)
			out.WriteByte('\n')
		}
	})
	read.Wait() // the pipe must be read to its end before Wait
	err = cmd.Wait()
	run.Wall = time.Since(start)
	run.Stdout = out.String()
	if err != nil {
		t.Fatalf("kafka: %s: %v (%v)\nstdout:\n%s\nstderr:\n%s\nlog (tail):\n%s", what, err, ctx.Err(),
			run.Stdout, errOut.String(), tail(filepath.Join(logDir, "server.log"), 3000))
	}
	run.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return run
}
