module warden.example/gohostile

go 1.21
