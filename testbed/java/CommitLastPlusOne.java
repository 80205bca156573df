import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A read_committed KafkaConsumer that reads {@code expect} records of one partition and
 * commits as Spring for Apache Kafka's listener container does (AckMode BATCH, its
 * default): after each poll, commitSync with the last record's offset + 1.
 *
 * <p>Arguments: bootstrap servers, group id, topic, partition, records to read, seconds to
 * wait at most. Prints the committed offset; exits 1 when fewer records came.
 */
public final class CommitLastPlusOne {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String group = args[1];
        TopicPartition partition = new TopicPartition(args[2], Integer.parseInt(args[3]));
        int expect = Integer.parseInt(args[4]);
        long deadline = System.nanoTime() + Duration.ofSeconds(Long.parseLong(args[5])).toNanos();

        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        int read = 0;
        long committed = -1;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.assign(List.of(partition));
            while (read < expect && System.nanoTime() < deadline) {
                ConsumerRecord<byte[], byte[]> last = null;
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    read++;
                    last = record;
                }
                if (last != null) {
                    committed = last.offset() + 1;
                    consumer.commitSync(Map.of(partition, new OffsetAndMetadata(committed)));
                }
            }
        }
        if (read != expect) {
            System.err.println("read " + read + " records of " + partition + ", expected " + expect);
            System.exit(1);
        }
        System.out.println(committed);
    }
}
