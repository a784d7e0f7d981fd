module github.com/supervisorhq/supervisor/gaterunner

go 1.26.8
