package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	level  string
	format string
}

// newLogger builds a zap logger writing to w. Level: debug, info, warn,
// error. Format: json (for collectors) or console (for people).
func (f logFlags) newLogger(w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(f.level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", f.level)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch f.format {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, usagef("--log-format %q: want json or console", f.format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}

func (f *logFlags) register(fs interface {
	StringVar(p *string, name, value, usage string)
}, defaultFormat string) {
	fs.StringVar(&f.level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", defaultFormat, "log format: json or console")
}

var _ = fmt.Sprint
