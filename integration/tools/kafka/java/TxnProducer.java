import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produces records with Kafka's own Java producer, for offsetkeeper's tests:
 * what a real application writes, transactions and aborts included.
 *
 * <p>Usage: {@code TxnProducer --bootstrap B --topic T --records N [options]}
 *
 * <pre>
 *   --mode idempotent|transactional   default idempotent
 *   --transactional-id ID             default a random one
 *   --txn-size K                      records per transaction, default 10
 *   --abort-every A                   every A-th transaction is aborted (0: none, the default)
 *   --compression none|gzip|snappy|lz4|zstd   default none
 *   --partitions P                    record i goes to partition i % P, default 1
 *   --batch-size BYTES                batch.size, default Kafka's
 *   --linger-ms MS                    linger.ms, default 5
 *   --value-size BYTES                default 100
 *   --hang H                          transactional: then begin one more transaction, send H records,
 *                                     flush them, print "hanging" and wait, the transaction open, to be
 *                                     killed (a producer gone without ending its transaction)
 *   --transaction-timeout-ms MS       transaction.timeout.ms, default Kafka's (60 s)
 * </pre>
 *
 * <p>Record i has key "k" + i and a value of --value-size bytes that starts
 * with "v" + i (9 digits) and "-", padded with 'x'. An aborted transaction's
 * records are flushed to the brokers before the abort, so the log holds them,
 * marked aborted. At the end it prints, for each partition,
 *
 * <pre>committed PARTITION COUNT
 * aborted PARTITION COUNT</pre>
 *
 * and exits 0; 1 on an error, 2 on bad arguments.
 */
public final class TxnProducer {
    private TxnProducer() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        opts.put("mode", "idempotent");
        opts.put("txn-size", "10");
        opts.put("abort-every", "0");
        opts.put("compression", "none");
        opts.put("partitions", "1");
        opts.put("linger-ms", "5");
        opts.put("value-size", "100");
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("bad argument " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        for (String required : new String[] {"bootstrap", "topic", "records"}) {
            if (!opts.containsKey(required)) {
                usage("--" + required + " is required");
            }
        }
        String mode = opts.get("mode");
        if (!mode.equals("idempotent") && !mode.equals("transactional")) {
            usage("--mode " + mode + ": idempotent or transactional");
        }
        boolean txn = mode.equals("transactional");
        String topic = opts.get("topic");
        int records = Integer.parseInt(opts.get("records"));
        int txnSize = Integer.parseInt(opts.get("txn-size"));
        int abortEvery = Integer.parseInt(opts.get("abort-every"));
        int partitions = Integer.parseInt(opts.get("partitions"));
        int valueSize = Integer.parseInt(opts.get("value-size"));
        if (records < 0 || txnSize < 1 || abortEvery < 0 || partitions < 1 || valueSize < 11) {
            usage("--records >= 0, --txn-size >= 1, --abort-every >= 0, --partitions >= 1, --value-size >= 11");
        }

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "offsetkeeper-txn-producer");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, opts.get("compression"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, opts.get("linger-ms"));
        if (opts.containsKey("batch-size")) {
            props.put(ProducerConfig.BATCH_SIZE_CONFIG, opts.get("batch-size"));
        }
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (opts.containsKey("transaction-timeout-ms")) {
            props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, opts.get("transaction-timeout-ms"));
        }
        int hang = Integer.parseInt(opts.getOrDefault("hang", "0"));
        if (hang > 0 && !txn) {
            usage("--hang needs --mode transactional");
        }
        if (txn) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG,
                    opts.getOrDefault("transactional-id", "offsetkeeper-txn-producer-" + UUID.randomUUID()));
        }

        long[] committed = new long[partitions];
        long[] aborted = new long[partitions];
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (txn) {
                producer.initTransactions();
            }
            int next = 0;
            int transactions = 0;
            while (next < records) {
                int n = txn ? Math.min(txnSize, records - next) : records;
                long[] counts = new long[partitions];
                if (txn) {
                    producer.beginTransaction();
                }
                for (int j = 0; j < n; j++, next++) {
                    int p = next % partitions;
                    producer.send(new ProducerRecord<>(topic, p, key(next), value(next, valueSize)), (md, e) -> {
                        if (e != null) {
                            failed.compareAndSet(null, e);
                        }
                    });
                    counts[p]++;
                }
                producer.flush();
                if (failed.get() != null) {
                    throw failed.get();
                }
                transactions++;
                boolean abort = txn && abortEvery > 0 && transactions % abortEvery == 0;
                if (abort) {
                    producer.abortTransaction();
                } else if (txn) {
                    producer.commitTransaction();
                }
                for (int p = 0; p < partitions; p++) {
                    (abort ? aborted : committed)[p] += counts[p];
                }
            }
            if (hang > 0) {
                producer.beginTransaction();
                for (int j = 0; j < hang; j++, next++) {
                    producer.send(new ProducerRecord<>(topic, next % partitions, key(next), value(next, valueSize)));
                }
                producer.flush();
                System.out.println("hanging");
                System.out.flush();
                Thread.sleep(Long.MAX_VALUE);
            }
        } catch (Exception e) {
            e.printStackTrace();
            System.err.println("TxnProducer: committed " + Arrays.toString(committed) + ", aborted " + Arrays.toString(aborted));
            System.exit(1);
        }
        StringBuilder out = new StringBuilder();
        for (int p = 0; p < partitions; p++) {
            out.append("committed ").append(p).append(' ').append(committed[p]).append('\n');
            out.append("aborted ").append(p).append(' ').append(aborted[p]).append('\n');
        }
        System.out.print(out);
        System.out.flush();
        System.exit(0);
    }

    private static byte[] key(int i) {
        return ("k" + i).getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] value(int i, int size) {
        byte[] v = new byte[size];
        Arrays.fill(v, (byte) 'x');
        byte[] head = String.format("v%09d-", i).getBytes(StandardCharsets.UTF_8);
        System.arraycopy(head, 0, v, 0, Math.min(head.length, size));
        return v;
    }

    private static void usage(String problem) {
        System.err.println("TxnProducer: " + problem);
        System.err.println("usage: TxnProducer --bootstrap B --topic T --records N [--mode idempotent|transactional]"
                + " [--transactional-id ID] [--txn-size K] [--abort-every A] [--compression none|gzip|snappy|lz4|zstd]"
                + " [--partitions P] [--batch-size BYTES] [--linger-ms MS] [--value-size BYTES] [--hang H]"
                + " [--transaction-timeout-ms MS]");
        System.exit(2);
    }
}
