import java.util.Comparator;
import java.util.Optional;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.replica.ClientMetadata;
import org.apache.kafka.common.replica.PartitionView;
import org.apache.kafka.common.replica.ReplicaSelector;
import org.apache.kafka.common.replica.ReplicaView;

/**
 * A broker plugin for offsetkeeper's tests (replica.selector.class): every
 * consumer is sent to a follower, the one of the lowest id, whatever its
 * rack and however far behind, so that a client that does not follow the
 * leader's preferred_read_replica (KIP-392) gets empty answers from the
 * leader forever. With no follower, the leader.
 */
public final class FollowerSelector implements ReplicaSelector {
    @Override
    public Optional<ReplicaView> select(TopicPartition topicPartition, ClientMetadata clientMetadata, PartitionView partitionView) {
        ReplicaView leader = partitionView.leader();
        return partitionView.replicas().stream()
                .filter(r -> r.endpoint().id() != leader.endpoint().id())
                .min(Comparator.comparingInt(r -> r.endpoint().id()))
                .or(() -> Optional.of(leader));
    }
}
