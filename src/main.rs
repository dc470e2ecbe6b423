fn main() {
    print!("{}", imagemap::crds::all_yaml().unwrap_or_default());
}
