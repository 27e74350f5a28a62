"""Planted bugs in 03_data_loading: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    # The transform runs once, in __init__: a random augmentation would be frozen for every epoch.
    "03-dataset": (
        '''class ArrayDataset(Dataset):
    def __init__(self, features, labels, transform=None):
        if len(features) != len(labels):
            raise ValueError("features and labels differ in length")
        self.features = features if transform is None else torch.stack([transform(x) for x in features])
        self.labels = labels

    def __len__(self):
        return len(self.features)

    def __getitem__(self, index):
        return self.features[index], self.labels[index]
''',
        "eager-transform",
    ),
    # Sorted by length (as pack_padded_sequence once required) but the labels keep the original order.
    "03-pad-collate": (
        '''def pad_collate(batch):
    sequences = sorted((sequence for sequence, _ in batch), key=len, reverse=True)
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    labels = torch.stack([label for _, label in batch])
    return pad_sequence(sequences, batch_first=True), lengths, labels
''',
        "order-changed",
    ),
    # Shuffles with the global RNG: the order depends on whatever else drew random numbers.
    "03-seeded-loader": (
        '''def make_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
''',
        "not-reproducible",
    ),
    # Seeded from the worker id alone: workers differ, but every epoch replays the same draws.
    "03-worker-init": (
        '''def reseed_dataset_rng(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)
''',
        "same-every-epoch",
    ),
    # Statistics computed on all rows before splitting: validation leaks into training.
    "03-split-normalize": (
        '''def split_and_normalize(x, y, *, val_fraction, seed):
    mean, std = x.mean(dim=0), x.std(dim=0).clamp_min(1e-8)
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val_rows, train_rows = order[:n_val], order[n_val:]
    train_set = TensorDataset((x[train_rows] - mean) / std, y[train_rows])
    val_set = TensorDataset((x[val_rows] - mean) / std, y[val_rows])
    return train_set, val_set, mean, std
''',
        "stats-from-all-data",
    ),
}
