package main

import (
	"io"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offsetkeeper/offsetkeeper/internal/enum"
)

// logLevel is --log-level: debug, info, warn or error.
type logLevel = enum.Of[logLevels]

const (
	logDebug logLevel = iota
	logInfo
	logWarn
	logError
)

type logLevels struct{}

func (logLevels) Enum() (string, []string) {
	return "log level", []string{"debug", "info", "warn", "error"}
}

// zapLevel is the zap level of l.
func zapLevel(l logLevel) zapcore.Level { return zapcore.Level(int(l) - 1) }

// logFormat is --log-format: json (for collectors) or console (for people).
type logFormat = enum.Of[logFormats]

const (
	logJSON logFormat = iota
	logConsole
)

type logFormats struct{}

func (logFormats) Enum() (string, []string) { return "log format", []string{"json", "console"} }

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	level  logLevel
	format logFormat
}

func (f *logFlags) register(fs *pflag.FlagSet, level logLevel, format logFormat) {
	f.level, f.format = level, format
	fs.Var(enumVar(&f.level), "log-level", "log level: debug, info, warn or error")
	fs.Var(enumVar(&f.format), "log-format", "log format: json or console")
}

// newLogger builds a zap logger writing to w.
func (f logFlags) newLogger(w io.Writer) *zap.Logger {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if f.format == logConsole {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zapLevel(f.level)))
}
