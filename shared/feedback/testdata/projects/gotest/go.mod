module example.com/fbfixture

go 1.22
