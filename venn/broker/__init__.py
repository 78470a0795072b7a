"""Kafka-side plumbing of the services: the topic catalogue, principals and ACLs, client
tuning, publishing, stream judgement, health. The local brokers that `venn up` starts are
`devtools`, not the library."""
