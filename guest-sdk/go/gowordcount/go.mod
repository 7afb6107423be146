module warden.example/gowordcount

go 1.21
