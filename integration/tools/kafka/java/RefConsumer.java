import java.io.BufferedOutputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.zip.CRC32;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The reference consumer of offsetkeeper's tests: what Kafka's own Java
 * consumer delivers from a topic, as the oracle to compare a reader with.
 *
 * <p>Usage: {@code RefConsumer BOOTSTRAP TOPIC read_committed|read_uncommitted [TIMEOUT_MS]}
 *
 * <p>It assigns every partition of TOPIC, seeks to the beginning, takes each
 * partition's end offset once (with read_committed, the last stable offset:
 * endOffsets honours the isolation level) and reads until each partition's
 * position reaches it. Records at or past that end, produced meanwhile, are
 * not printed. It prints one line per record delivered,
 *
 * <pre>PARTITION OFFSET KEY_LENGTH VALUE_LENGTH VALUE_CRC32</pre>
 *
 * (lengths -1 for null; the CRC-32 (IEEE) of the value, 8 hex digits), in
 * the order delivered, and exits 0; 1 on an error or when TIMEOUT_MS
 * (default 120000) passes first, 2 on bad arguments.
 */
public final class RefConsumer {
    private RefConsumer() {}

    public static void main(String[] args) {
        if (args.length < 3 || args.length > 4
                || !(args[2].equals("read_committed") || args[2].equals("read_uncommitted"))) {
            System.err.println("usage: RefConsumer BOOTSTRAP TOPIC read_committed|read_uncommitted [TIMEOUT_MS]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String isolation = args[2];
        long timeoutMs = args.length == 4 ? Long.parseLong(args[3]) : 120_000L;
        long deadline = System.currentTimeMillis() + timeoutMs;

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "offsetkeeper-ref-consumer");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
            if (infos == null || infos.isEmpty()) {
                System.err.println("RefConsumer: topic " + topic + " has no partitions");
                System.exit(1);
            }
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : infos) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            partitions.sort(Comparator.comparingInt(TopicPartition::partition));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, Duration.ofMillis(timeoutMs));

            CRC32 crc = new CRC32();
            while (!reachedEnd(consumer, partitions, end)) {
                if (System.currentTimeMillis() > deadline) {
                    StringBuilder where = new StringBuilder();
                    for (TopicPartition tp : partitions) {
                        where.append(' ').append(tp.partition()).append(':')
                                .append(consumer.position(tp)).append('/').append(end.get(tp));
                    }
                    System.err.println("RefConsumer: timed out after " + timeoutMs + " ms; position/end:" + where);
                    out.flush();
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) {
                        continue;
                    }
                    long sum = -1;
                    if (r.value() != null) {
                        crc.reset();
                        crc.update(r.value());
                        sum = crc.getValue();
                    }
                    out.printf("%d %d %d %d %08x%n", r.partition(), r.offset(),
                            r.key() == null ? -1 : r.key().length,
                            r.value() == null ? -1 : r.value().length,
                            sum < 0 ? 0 : sum);
                }
            }
        } catch (Exception e) {
            out.flush();
            e.printStackTrace();
            System.exit(1);
        }
        out.flush();
        System.exit(0);
    }

    private static boolean reachedEnd(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> partitions,
            Map<TopicPartition, Long> end) {
        for (TopicPartition tp : partitions) {
            if (consumer.position(tp) < end.get(tp)) {
                return false;
            }
        }
        return true;
    }
}
