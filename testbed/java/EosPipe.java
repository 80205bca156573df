// A Kafka Streams application with exactly-once v2 (testbed.streams.StreamsEosApp): copies
// every record of the source topic to the sink topic, prints one line per record, and
// commits only every commit.interval.ms (10 minutes here), so its transaction stays open
// while it runs. Killed with SIGKILL, it leaves that transaction to its coordinator.
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.clients.producer.ProducerConfig;

public final class EosPipe {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], applicationId = args[1], source = args[2], sink = args[3];
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 600_000);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 600_000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], byte[]>stream(source)
            .peek((k, v) -> System.out.println("PROCESSED"))
            .to(sink);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> { streams.close(); done.countDown(); }));
        streams.start();
        System.out.println("STARTED");
        done.await();
    }
}
