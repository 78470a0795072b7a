#!/bin/sh
# Apache Kafka's bin/kafka-server-start.sh: the broker, with its heap (1 GB unless
# KAFKA_HEAP_OPTS says otherwise) and the log4j2 configuration the wrapper wrote.
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
export KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml}"
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
