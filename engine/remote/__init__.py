"""The server backend: the model run by one or several llama-servers over HTTP.

`http` is the client (connections, streams, errors); `rows` the `RemoteRows` backend of one
server (engine.backend `Backend`), with what it knows in `nodes` (distributions by token path)
and `slots` (which server slot holds which prompt); `bounded` the covering search's rows of
exact values and upper bounds, `frontier` and `batch` what a proof still needs and the one
request that asks for it; `servers` several servers (`ServerSet`) or a balancer
(`BalancedSet`); `connect` first contact (the server's checks and the local vocabulary).
"""
