module github.com/supervisorhq/supervisor/worker

go 1.26.8
