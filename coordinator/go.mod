module github.com/supervisorhq/supervisor/coordinator

go 1.26.8
